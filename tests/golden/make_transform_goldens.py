#!/usr/bin/env python3
"""Goldens for the per-family evaluation transforms (tests/vit/io/test_transforms.cpp).

Writes tests/data/images/photo_61x47.jpg (a synthetic photo-like JPEG) and
tests/data/transform_golden.safetensors: for each family and image, the uint8 image the
family's own evaluation transform feeds to ToTensor/Normalize (HWC, RGB), at a 32x32 input so
the file stays small, plus the family's mean/std/crop/interpolation in the metadata:

  timm_vit    timm.create_model('vit_small_patch16_224').pretrained_cfg (augreg: mean = std =
              0.5, crop 0.9, bicubic) via timm.data.resolve_data_config / create_transform
  timm_swin   swin_tiny_patch4_window7_224 (ms_in1k: ImageNet, crop 0.9, bicubic)
  timm_squash the same ViT cfg with crop_mode='squash', crop_pct 0.95
  tv_vit      torchvision ViT_B_16_Weights.IMAGENET1K_V1.transforms() semantics (resize 256,
              bilinear, crop 224) at 32: resize floor(32 / (224 / 256)) = 36, crop 32, on a
              uint8 tensor with antialias as torchvision's ImageClassification does
  tv_swin     Swin_T_Weights.IMAGENET1K_V1 (resize 232, bicubic) at 32: resize 33, crop 32

Also `<image>/decoded`: PIL's Image.open(f).convert('RGB') of each image (the JPEG's decoder
must agree with OpenCV's).

And the classifier's acceptance goldens (tests/vit/io/test_classifier.cpp): timm's
vit_small_patch16_224 at full size (12 blocks, 1000 classes) with synthetic weights (a function of
each tensor's timm name, tests/golden/synthetic_weights.h: too large to store, rebuilt by the
test), its hub config.json written by timm (timm_vit_small/config.json), and timm's top-5 of each
committed image through timm's own PIL transform (timm_vit_small/top5.json), with a hash of the
state dict's names and shapes so the test knows it rebuilt timm's file. Tooling only (a venv with torch, torchvision, timm, safetensors,
pillow); tests never run Python:

    python3 -m venv /tmp/gold-venv && /tmp/gold-venv/bin/pip install torch torchvision timm safetensors pillow
    /tmp/gold-venv/bin/python tests/golden/make_transform_goldens.py [--train-transform]

And tests/data/train_transform_golden.safetensors: timm's training transform (its random-resized
crop and flip) for fixed boxes (train_transform_goldens below); --train-transform writes it alone.
"""
import json
import math
import os

import numpy as np
import timm
import torch
import torchvision
import torchvision.transforms.functional as TF
from PIL import Image
from safetensors.torch import save_file
from timm.data import create_transform, resolve_data_config
from timm.models._hub import save_config_for_hf

from make_goldens import MASK64, fnv1a64, synthetic
from torchvision.transforms import InterpolationMode

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "data")
IMAGES = os.path.join(DATA, "images")
SIZE = 32


def photo_jpeg(path):
    """A smooth scene with edges and texture (so chroma subsampling and the DCT matter)."""
    rng = np.random.default_rng(20261201)
    h, w = 47, 61
    y, x = np.mgrid[0:h, 0:w].astype(np.float64)
    r = 128 + 90 * np.sin(x / 9.0) * np.cos(y / 13.0)
    g = 100 + 80 * (x / w) + 40 * ((x - 50) ** 2 + (y - 30) ** 2 < 300)
    b = 60 + 150 * (y / h)
    img = np.stack([r, g, b], -1) + rng.normal(0, 6, (h, w, 3))
    Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(path, quality=90)


def uint8_before_to_tensor(transform, img):
    """Runs a timm eval transform up to (not including) MaybeToTensor/Normalize."""
    steps = transform.transforms
    for t in steps:
        name = type(t).__name__
        if name in ("ToTensor", "MaybeToTensor", "Normalize"):
            break
        img = t(img)
    return torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())


def timm_family(model_name, **overrides):
    m = timm.create_model(model_name, pretrained=False)
    cfg = resolve_data_config({"input_size": (3, SIZE, SIZE), **overrides}, model=m)
    return cfg, create_transform(**cfg)


def tv_uint8(img, resize_224, interpolation):
    """torchvision ImageClassification at 32: resize the shorter side, then centre crop, on a
    uint8 tensor with antialias (its forward before convert_image_dtype/normalize)."""
    resize = math.floor(SIZE / (224 / resize_224))
    t = TF.pil_to_tensor(img)
    t = TF.resize(t, [resize], interpolation=interpolation, antialias=True)
    t = TF.center_crop(t, [SIZE])
    return t.permute(1, 2, 0).contiguous(), resize


def main():
    os.makedirs(IMAGES, exist_ok=True)
    photo_jpeg(os.path.join(IMAGES, "photo_61x47.jpg"))
    images = {"photo_61x47": "photo_61x47.jpg", "rgb_67x45": "rgb_67x45.png"}
    out, meta = {}, {}

    families = {
        "timm_vit": timm_family("vit_small_patch16_224"),
        "timm_swin": timm_family("swin_tiny_patch4_window7_224"),
        "timm_squash": timm_family("vit_small_patch16_224", crop_mode="squash", crop_pct=0.95),
    }
    for fam, (cfg, _) in families.items():
        meta[fam] = {k: (list(v) if isinstance(v, tuple) else v) for k, v in cfg.items()
                     if k in ("input_size", "interpolation", "mean", "std", "crop_pct", "crop_mode")}
    meta["tv_vit"] = {"resize_224": 256, "interpolation": "bilinear"}
    meta["tv_swin"] = {"resize_224": 232, "interpolation": "bicubic"}

    for stem, file in images.items():
        with Image.open(os.path.join(IMAGES, file)) as im:
            img = im.convert("RGB")
        out[f"{stem}/decoded"] = torch.from_numpy(np.asarray(img, dtype=np.uint8).copy())
        for fam, (_, transform) in families.items():
            out[f"{stem}/{fam}"] = uint8_before_to_tensor(transform, img)
        out[f"{stem}/tv_vit"], meta["tv_vit"]["resize"] = tv_uint8(
            img, 256, InterpolationMode.BILINEAR)
        out[f"{stem}/tv_swin"], meta["tv_swin"]["resize"] = tv_uint8(
            img, 232, InterpolationMode.BICUBIC)

    for k, v in out.items():
        assert v.dtype == torch.uint8, k
    save_file(out, os.path.join(DATA, "transform_golden.safetensors"), metadata={
        "families": json.dumps(meta, sort_keys=True),
        "versions": json.dumps({"timm": timm.__version__, "torch": torch.__version__,
                                "torchvision": torchvision.__version__,
                                "pillow": Image.__version__}),
    })
    print("wrote", len(out), "tensors;", json.dumps(meta, sort_keys=True))


def state_dict_hash(state):
    """fnv1a64 of 'name:d0xd1x...' lines (sorted names), mirrored by the C++ test."""
    text = "".join(f"{k}:{'x'.join(str(d) for d in v.shape)}\n" for k, v in sorted(state.items()))
    return f"{fnv1a64(text):016x}"


@torch.no_grad()
def classifier_goldens():
    out_dir = os.path.join(DATA, "timm_vit_small")
    os.makedirs(out_dir, exist_ok=True)
    model = timm.create_model("vit_small_patch16_224", pretrained=False).eval()
    for name, p in model.named_parameters():
        p.copy_(synthetic(name, list(p.shape)))
    save_config_for_hf(model, os.path.join(out_dir, "config.json"))
    transform = create_transform(**resolve_data_config({}, model=model))
    top5 = {}
    for file in ("photo_61x47.jpg", "rgb_67x45.png"):
        with Image.open(os.path.join(IMAGES, file)) as im:
            x = transform(im.convert("RGB")).unsqueeze(0)
        logits = model(x)[0].double()
        probs = torch.softmax(logits, 0)
        order = torch.argsort(logits, descending=True)
        # The order must not hinge on float rounding: neighbours in the top 6 differ clearly.
        gaps = logits[order[:5]] - logits[order[1:6]]
        assert float(gaps.min()) > 1e-3, (file, gaps)
        top5[file] = [[int(i), round(float(probs[i]), 7)] for i in order[:5]]
    golden = {"state_dict_fnv1a64": state_dict_hash(model.state_dict()), "top5": top5,
              "versions": {"timm": timm.__version__, "torch": torch.__version__}}
    with open(os.path.join(out_dir, "top5.json"), "w") as f:
        json.dump(golden, f, sort_keys=True)
        f.write("\n")
    print("classifier goldens:", json.dumps(golden["top5"]))


# Boxes (top, left, height, width, flip) of timm's training transform, drawn by hand to cover a
# downscale, an upscale, a box of the output size (PIL copies it unfiltered) and the whole image.
TRAIN_BOXES = [(3, 5, 30, 40, False), (0, 0, 47, 61, True), (10, 7, 20, 20, False),
               (1, 2, 32, 32, True), (12, 30, 33, 17, True)]


def train_transform_goldens():
    """tests/data/train_transform_golden.safetensors (tests/vit/io/test_transforms.cpp): timm's
    training transform after its random draws, RandomResizedCropAndInterpolation's
    F.resized_crop(img, top, left, h, w, (32, 32), interpolation) and RandomHorizontalFlip, as the
    uint8 image before ToTensor (HWC, RGB), for each box of TRAIN_BOXES under the interpolations
    timm models use."""
    modes = {"bicubic": InterpolationMode.BICUBIC, "bilinear": InterpolationMode.BILINEAR}
    out = {}
    for stem, file in {"photo_61x47": "photo_61x47.jpg", "rgb_67x45": "rgb_67x45.png"}.items():
        with Image.open(os.path.join(IMAGES, file)) as im:
            img = im.convert("RGB")
        for k, (top, left, h, w, flip) in enumerate(TRAIN_BOXES):
            for name, mode in modes.items():
                crop = TF.resized_crop(img, top, left, h, w, [SIZE, SIZE], interpolation=mode)
                if flip:
                    crop = TF.hflip(crop)
                out[f"{stem}/{k}/{name}"] = torch.from_numpy(np.asarray(crop, dtype=np.uint8).copy())
    save_file(out, os.path.join(DATA, "train_transform_golden.safetensors"), metadata={
        "boxes": json.dumps(TRAIN_BOXES), "size": str(SIZE),
        "versions": json.dumps({"timm": timm.__version__, "torchvision": torchvision.__version__,
                                "pillow": Image.__version__}),
    })
    print("wrote", len(out), "train transform tensors")


if __name__ == "__main__":
    import sys
    if sys.argv[1:] == ["--train-transform"]:
        train_transform_goldens()  # only the training transform's file
    else:
        main()
        classifier_goldens()
        train_transform_goldens()
