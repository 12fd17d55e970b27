"""vitpe: Vision Transformers with interchangeable 2D positional encodings, from Python.

    import vitpe
    clf = vitpe.Classifier("vit-fmnist")            # a checkpoint or a preset
    print(clf.classify("shoe.png", k=3))            # [{'index': 7, 'label': 'Sneaker', ...}, ...]
    features = clf.embed(["a.png", "b.png"], normalize=True)   # numpy [2, D]
    model = vitpe.load("vit_small.safetensors", heads=6)
    logits = model.forward(batch)                   # numpy float32 [B, C, H, W] -> [B, classes]
"""
from ._vitpe import Classifier, Model, encodings, load, version

__all__ = ["Classifier", "Model", "encodings", "load", "version"]
__version__ = version()
