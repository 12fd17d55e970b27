"""vitpe: Vision Transformers with interchangeable 2D positional encodings, from Python.

    import vitpe
    clf = vitpe.Classifier("vit-fmnist")            # a checkpoint or a preset
    print(clf.classify("shoe.png", k=3))            # [{'index': 7, 'label': 'Sneaker', ...}, ...]
    features = clf.embed(["a.png", "b.png"], normalize=True)   # numpy [2, D]
    model = vitpe.load("vit_small.safetensors", heads=6)
    logits = model.forward(batch)                   # numpy float32 [B, C, H, W] -> [B, classes]
    run = vitpe.train(encoding="rope-mixed", epochs=2, subset=2000, progress=True)
    study = vitpe.compare("runs/study", encodings=["none", "rope-mixed"], epochs=2, subset=2000)
    sim = vitpe.encodings.similarity("sincos2d", grid=(7, 7))   # numpy [49, 49]
"""
from ._vitpe import Classifier, Model, compare, encodings, load, train, version

__all__ = ["Classifier", "Model", "compare", "encodings", "load", "train", "version"]
__version__ = version()
