#!/usr/bin/python3
"""Golden data for vitpe's parity tests: small random timm / torchvision ViT and Swin models,
their weights, inputs and logits, and timm's evaluation transform on synthetic images.

Run (never at test time; the tests read only the files this writes):
    /usr/bin/python3 -m pip install --break-system-packages --no-deps timm==0.9.16 safetensors
    /usr/bin/python3 tests/golden/make_goldens.py          # writes tests/data/
Needs torch (Debian's 1.13 works), torchvision (0.14), timm 0.9.16, Pillow, numpy and the
`safetensors` Python package (only to cross-check the files, which are written by hand).
Deterministic: a fixed seed, CPU, one thread, eval mode; rerunning gives byte-identical files
with the same library versions.

Conventions for every model:
- Weights are random timm/torchvision initialisation plus random perturbations (so no bias is
  zero and no LayerNorm weight is one; matrices get noise of std 1/sqrt(fan_in) so attention is
  peaked and the logits depend on the input; position tables get std 0.5 so that the position
  moves the logits), then ROUNDED TO BF16 and stored as BF16. The PyTorch
  model computes the logits with exactly those rounded values in f32, so loading the BF16 file
  into f32 reproduces the model exactly: the bf16 storage costs no accuracy, only halves the
  size (tests/data must stay < 2 MiB).
- Inputs are bf16-rounded N(0, 1) values stored as BF16 (exact in f32 as well).
- Logits are F32, computed in f32 on the CPU.
- `<model>.safetensors` holds only the weights (a checkpoint as the library would meet it),
  `<model>_io.safetensors` the inputs and logits. `__metadata__` of each weights file has
  `golden_source` (library and class) and `golden_config` (JSON of the constructor arguments).

Files (see tests/data/README.md for the tensor names):
  vit_timm.safetensors / vit_timm_io.safetensors
      timm VisionTransformer(img 32, patch 8, D 64, depth 2, heads 4, 10 classes, class token).
      io: input [2,3,32,32] -> logits [2,10]; the same weights with dynamic_img_size=True at
      48x48 (input_48x48, logits_48x48) and at 32 rows x 48 cols (input_32x48, logits_32x48);
      pos_embed_48x48 / pos_embed_32x48 are timm's resampled pos_embed ([1, 1+6*6, 64],
      [1, 1+4*6, 64]): F.interpolate(bicubic, antialias=True, align_corners=False) of the 4x4
      grid, which for upsampling is PIL-style bicubic (a = -0.5, weights renormalised at the
      border, not clamped), the class token's entry is kept.
  vit_timm_avg.safetensors / vit_timm_avg_io.safetensors
      same shape but depth 1, class_token=False, global_pool='avg' (mean over tokens, fc_norm;
      `norm` is Identity so the file has fc_norm.* and no norm.*). io: input, logits.
  vit_tv.safetensors / vit_tv_io.safetensors
      torchvision VisionTransformer(image_size=32, patch_size=8, num_layers=1, num_heads=4,
      hidden_dim=64, mlp_dim=256, num_classes=10). io: input, logits.
  swin_timm.safetensors / swin_timm_old.safetensors / swin_timm_io.safetensors
      timm SwinTransformer(img 56, patch 4, window 7, embed 32, depths (2,2), heads (2,4),
      10 classes), timm >= 0.9 names. _old: the same values in the pre-0.9 layout: patch merging
      at the END of stage i (`layers.0.downsample.*` instead of `layers.1.downsample.*`),
      classifier `head.weight`/`head.bias` instead of `head.fc.*`, plus the derived buffers
      `layers.i.blocks.j.attn.relative_position_index` (I64 [49, 49]) and
      `layers.i.blocks.j.attn_mask` (F32 [nW, 49, 49], only for shifted blocks) that old
      checkpoints carry and a loader must ignore. io: input [2,3,56,56] -> logits; a model built
      with img_size=(56, 112) and the same state dict (timm 0.9.16 cannot change a Swin's size
      after construction; the relative-bias tables do not depend on it) gives input_56x112
      [1,3,56,112] -> logits_56x112 (stage 1 is 7x14: window 7 in both axes, shift 0 along rows
      but 3 along columns, as timm decides per axis); img_size=64 gives
      input_64x64 -> logits_64x64 (16x16 and 8x8 grids: not divisible by the window, so timm
      pads: it rolls, then zero-pads bottom/right to a multiple of 7 AFTER norm1, builds the
      shift mask over the padded size, and the padded tokens are attended to).
  swin_tv.safetensors / swin_tv_io.safetensors
      torchvision SwinTransformer(patch_size=[4,4], embed_dim=32, depths=[2,2],
      num_heads=[2,4], window_size=[7,7], num_classes=10); its state dict has I64 buffers
      `features.{1,3}.{0,1}.attn.relative_position_index` [2401]: only the first
      (features.1.0) is kept, for size. io: input [1,3,56,56], logits [1,10].
  vit_s16_synth_io.safetensors
      A ViT-S/16 at 224 (D 384, depth 2, 6 heads, 10 classes, timm) is 3.9 M parameters (7.8
      MB even in bf16), too big for the folder, so its weights and input are not stored: every
      tensor is a deterministic function of its timm name (see `synthetic` below and
      tests/golden/synthetic_weights.h for the C++ twin). The file holds `logits` [1, 10] and
      a copy of `input` is not stored either (the input is synthetic("input", [1,3,224,224])).
      `__metadata__["params"]` is JSON {timm name: shape} of every parameter; `check/<name>`
      holds synthetic(name) for cls_token, blocks.0.norm1.weight and blocks.0.attn.qkv.bias.
  official_writer.safetensors
      Written by the `safetensors` package (not by hand): f32 [2,3] = arange(6) - 2.5,
      bf16 [1, -2, 0.5, 3.140625], f16 [1, -0.5, 65504], i64 [7, -1]; metadata format=pt.
  images/*.png and preprocess_golden.safetensors
      Synthetic PNGs (RGB 8-bit 67x45, grayscale 8-bit 40x52, RGBA 8-bit 50x50 with varying
      alpha, RGB 16-bit 36x30, RGB 8-bit 20x14 smaller than the crop, grayscale 16-bit 30x30)
      and timm's eval transform of each: `<stem>/32x32` = create_transform(input_size=(3,32,32),
      crop_pct=0.875, interpolation='bicubic') applied to Image.open(f).convert('RGB') (as
      timm's datasets load images); for rgb_67x45 and gray_40x52 also `<stem>/24x40` =
      input_size (3,24,40) (rows x cols) with
      interpolation='bilinear' (timm's non-square path, ResizeKeepRatio, resizes bilinearly
      whatever interpolation is asked) and `<stem>/gray_32x32` = 1 channel: convert('L') then the
      32x32 bicubic transform with mean 0.5, std 0.25. Not for gray16 (PIL clips 16-bit
      grayscale to 255 instead of scaling; see vit/preprocess.h).
"""
import json
import os
import struct
import sys
import zlib

import numpy as np
import torch
import torchvision
import timm
from PIL import Image
from safetensors.torch import load_file
from timm.data import create_transform
from timm.models.swin_transformer import SwinTransformer as TimmSwin
from timm.models.vision_transformer import VisionTransformer as TimmViT
from torchvision.models.swin_transformer import SwinTransformer as TvSwin
from torchvision.models.vision_transformer import VisionTransformer as TvViT

SEED = 20260101
HERE = os.path.dirname(os.path.abspath(__file__))
OUT = os.path.normpath(os.path.join(HERE, "..", "data"))


def bf16(t):
    """Rounds to the nearest bf16 value, kept as f32."""
    return t.to(torch.bfloat16).to(torch.float32)


def perturb_and_round(model, gen):
    """Adds small noise to every parameter, then rounds all of them to bf16 (in place)."""
    with torch.no_grad():
        for name, p in model.named_parameters():
            if any(k in name for k in ("pos_embed", "pos_embedding", "cls_token", "class_token",
                                       "relative_position_bias_table")):
                std = 0.5
            elif p.ndim == 1:
                std = 0.1
            else:
                # ~1/sqrt(fan_in): attention is peaked and the logits depend on the input
                # (with the default 0.02 the two batch items gave nearly equal logits).
                std = p[0].numel() ** -0.5
            p.add_(torch.randn(p.shape, generator=gen) * std)
            p.copy_(bf16(p))


def weights_dict(model, keep_buffers):
    """state_dict with float tensors as BF16 (exact: they are bf16-rounded)."""
    out = {}
    for k, v in model.state_dict().items():
        if v.dtype.is_floating_point:
            out[k] = v.detach().to(torch.bfloat16).contiguous()
        elif keep_buffers:
            out[k] = v.detach().contiguous()
    return out


DTYPES = {torch.float32: "F32", torch.bfloat16: "BF16", torch.int64: "I64"}


def save(name, tensors, metadata=None):
    """Writes a safetensors file by hand (the format is trivial) so that the bytes are
    reproducible: the `safetensors` package orders __metadata__ by a hash map."""
    header, blobs, offset = {}, [], 0
    if metadata:
        header["__metadata__"] = dict(sorted(metadata.items()))
    for k in sorted(tensors):
        v = tensors[k].detach().contiguous()
        raw = (v.view(torch.int16) if v.dtype == torch.bfloat16 else v).numpy().tobytes()
        header[k] = {"dtype": DTYPES[v.dtype], "shape": list(v.shape),
                     "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)
    path = os.path.join(OUT, name)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))
    print(f"  {name}: {len(tensors)} tensors, {os.path.getsize(path)} bytes")


def meta(source, config):
    return {"golden_source": source, "golden_config": json.dumps(config, sort_keys=True)}


def rand_input(gen, *shape):
    return bf16(torch.randn(*shape, generator=gen))


def io_tensor(x):
    return x.detach().to(torch.bfloat16).contiguous()


@torch.no_grad()
def vit_timm(gen):
    cfg = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10)
    model = TimmViT(**cfg).eval()
    perturb_and_round(model, gen)
    save("vit_timm.safetensors", weights_dict(model, False),
         meta(f"timm {timm.__version__} VisionTransformer", cfg))
    io = {}
    x = rand_input(gen, 2, 3, 32, 32)
    io["input"], io["logits"] = io_tensor(x), model(x).float()
    # The same weights at other input sizes: timm's dynamic_img_size resamples pos_embed.
    dyn = TimmViT(**cfg, dynamic_img_size=True).eval()
    dyn.load_state_dict(model.state_dict())
    for rows, cols in ((48, 48), (32, 48)):
        x = rand_input(gen, 1, 3, rows, cols)
        tag = f"{rows}x{cols}"
        io[f"input_{tag}"], io[f"logits_{tag}"] = io_tensor(x), dyn(x).float()
        io[f"pos_embed_{tag}"] = timm.layers.resample_abs_pos_embed(
            dyn.pos_embed, (rows // 8, cols // 8), num_prefix_tokens=1).float().contiguous()
    save("vit_timm_io.safetensors", io)

    # Depth 1 is enough to test pooling and fc_norm, and keeps tests/data small.
    cfg_avg = dict(cfg, depth=1, class_token=False, global_pool="avg")
    model = TimmViT(**cfg_avg).eval()
    perturb_and_round(model, gen)
    save("vit_timm_avg.safetensors", weights_dict(model, False),
         meta(f"timm {timm.__version__} VisionTransformer", cfg_avg))
    x = rand_input(gen, 2, 3, 32, 32)
    save("vit_timm_avg_io.safetensors", {"input": io_tensor(x), "logits": model(x).float()})


@torch.no_grad()
def vit_torchvision(gen):
    # One layer: this golden proves the torchvision names (in_proj split, mlp.0/mlp.3, heads.head)
    # and its eps; depth is covered by the timm model, and the bytes are needed elsewhere.
    cfg = dict(image_size=32, patch_size=8, num_layers=1, num_heads=4, hidden_dim=64,
               mlp_dim=256, num_classes=10)
    model = TvViT(**cfg).eval()
    perturb_and_round(model, gen)
    save("vit_tv.safetensors", weights_dict(model, False),
         meta(f"torchvision {torchvision.__version__} VisionTransformer", cfg))
    x = rand_input(gen, 2, 3, 32, 32)
    save("vit_tv_io.safetensors", {"input": io_tensor(x), "logits": model(x).float()})


def swin_old_layout(model):
    """timm >= 0.9 Swin state dict -> the pre-0.9 layout, derived buffers included."""
    out = {}
    for k, v in model.state_dict().items():
        parts = k.split(".")
        if k.startswith("layers.") and parts[2] == "downsample":
            # New: merging at the start of stage i (i >= 1). Old: at the end of stage i - 1.
            parts[1] = str(int(parts[1]) - 1)
            k = ".".join(parts)
        if k.startswith("head.fc."):
            k = "head." + k[len("head.fc."):]
        out[k] = v.detach().to(torch.bfloat16).contiguous()
    for si, stage in enumerate(model.layers):
        for bi, block in enumerate(stage.blocks):
            prefix = f"layers.{si}.blocks.{bi}."
            out[prefix + "attn.relative_position_index"] = \
                block.attn.relative_position_index.to(torch.int64).contiguous()
            if block.attn_mask is not None:
                out[prefix + "attn_mask"] = block.attn_mask.float().contiguous()
    return out


@torch.no_grad()
def swin_timm(gen):
    cfg = dict(img_size=56, patch_size=4, window_size=7, embed_dim=32, depths=(2, 2),
               num_heads=(2, 4), num_classes=10)
    model = TimmSwin(**cfg).eval()
    perturb_and_round(model, gen)
    md = meta(f"timm {timm.__version__} SwinTransformer", cfg)
    save("swin_timm.safetensors", weights_dict(model, False), md)
    save("swin_timm_old.safetensors", swin_old_layout(model),
         meta(f"timm {timm.__version__} SwinTransformer, renamed to the pre-0.9 layout", cfg))
    io = {}
    x = rand_input(gen, 2, 3, 56, 56)
    io["input"], io["logits"] = io_tensor(x), model(x).float()
    for rows, cols in ((56, 112), (64, 64)):
        other = TimmSwin(**dict(cfg, img_size=(rows, cols))).eval()
        other.load_state_dict(model.state_dict())
        x = rand_input(gen, 1, 3, rows, cols)
        tag = f"{rows}x{cols}"
        io[f"input_{tag}"], io[f"logits_{tag}"] = io_tensor(x), other(x).float()
    save("swin_timm_io.safetensors", io)


@torch.no_grad()
def swin_torchvision(gen):
    cfg = dict(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
               window_size=[7, 7], num_classes=10)
    model = TvSwin(**cfg).eval()
    perturb_and_round(model, gen)
    weights = weights_dict(model, True)
    # torchvision keeps relative_position_index (I64 [2401]) in its state dict; one copy shows a
    # loader meeting it, all four would cost 77 KB of the folder's 2 MiB.
    for k in [k for k in weights if k.endswith("relative_position_index")]:
        if k != "features.1.0.attn.relative_position_index":
            del weights[k]
    save("swin_tv.safetensors", weights,
         meta(f"torchvision {torchvision.__version__} SwinTransformer", cfg))
    x = rand_input(gen, 1, 3, 56, 56)
    save("swin_tv_io.safetensors", {"input": io_tensor(x), "logits": model(x).float()})


# ---- synthetic weights (ViT-S/16 at 224, too large to store) -------------------------------

MASK64 = (1 << 64) - 1


def fnv1a64(s):
    h = 0xCBF29CE484222325
    for b in s.encode("utf-8"):
        h = ((h ^ b) * 0x100000001B3) & MASK64
    return h


def synthetic_uniform(name, numel):
    """numel values in [-0.5, 0.5) on a 2^-24 grid (exact in f32), a function of the name.

    z_i = splitmix64(fnv1a64(name) + (i + 1) * 0x9E3779B97F4A7C15), u_i = (z_i >> 40) * 2^-24,
    value_i = u_i - 0.5. Mirrored in tests/golden/synthetic_weights.h.
    """
    h = np.uint64(fnv1a64(name))
    i = np.arange(1, numel + 1, dtype=np.uint64)
    with np.errstate(over="ignore"):
        z = h + i * np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
    u = (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0 ** -24)
    return u - np.float32(0.5)


def synthetic(name, shape):
    """The synthetic tensor of a parameter, by its timm name (computed in f32):
    LayerNorm weights (1-D '.weight'): 1 + v / 2; other 1-D tensors (biases): v / 4;
    pos_embed, cls_token and 'input': v * 2; all other tensors: v / 8 (v in [-0.5, 0.5))."""
    v = synthetic_uniform(name, int(np.prod(shape)) if len(shape) else 1).reshape(shape)
    if name in ("pos_embed", "cls_token", "input"):
        v = v * np.float32(2.0)
    elif len(shape) == 1 and name.endswith(".weight"):
        v = np.float32(1.0) + v * np.float32(0.5)
    elif len(shape) == 1:
        v = v * np.float32(0.25)
    else:
        v = v * np.float32(0.125)
    return torch.from_numpy(np.ascontiguousarray(v, dtype=np.float32))


@torch.no_grad()
def vit_s16_synth():
    cfg = dict(img_size=224, patch_size=16, embed_dim=384, depth=2, num_heads=6, num_classes=10)
    model = TimmViT(**cfg).eval()
    params = {}
    for name, p in model.named_parameters():
        p.copy_(synthetic(name, list(p.shape)))
        params[name] = list(p.shape)
    x = synthetic("input", [1, 3, 224, 224])
    logits = model(x).float()
    md = meta(f"timm {timm.__version__} VisionTransformer, synthetic weights", cfg)
    md["params"] = json.dumps(params)
    # A few synthetic tensors, so a test can check the C++ generator against this one.
    checks = {f"check/{n}": synthetic(n, params[n])
              for n in ("cls_token", "blocks.0.norm1.weight", "blocks.0.attn.qkv.bias")}
    save("vit_s16_synth_io.safetensors", {"logits": logits, **checks}, md)


# ---- images and timm's eval transform ------------------------------------------------------

def png_bytes(arr):
    """A PNG of a uint8 or uint16 HxW, HxWx3 or HxWx4 array (PIL cannot write 16-bit RGB)."""
    h, w = arr.shape[:2]
    ch = 1 if arr.ndim == 2 else arr.shape[2]
    depth = 16 if arr.dtype == np.uint16 else 8
    color = {1: 0, 2: 4, 3: 2, 4: 6}[ch]
    raw = arr.astype(">u2" if depth == 16 else "u1").reshape(h, -1).tobytes()
    stride = len(raw) // h
    rows = b"".join(b"\x00" + raw[y * stride:(y + 1) * stride] for y in range(h))

    def chunk(kind, data):
        c = struct.pack(">I", len(data)) + kind + data
        return c + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, depth, color, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(rows, 9))
            + chunk(b"IEND", b""))


def synthetic_image(rng, h, w, ch, maxval):
    """Smooth gradients + a sharp-edged square + noise: exercises the filter's negative lobes
    (overshoot clipping) as well as smooth interpolation."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    planes = []
    for c in range(ch):
        p = 0.5 + 0.4 * np.sin(xx / (3.0 + c) + c) * np.cos(yy / (4.0 + 2 * c))
        p[h // 4: h // 2, w // 3: 2 * w // 3] = 1.0 if c % 2 == 0 else 0.0
        p += rng.normal(0, 0.08, size=(h, w))
        planes.append(np.clip(p, 0, 1))
    img = np.stack(planes, axis=-1) if ch > 1 else planes[0]
    return np.round(img * maxval).astype(np.uint16 if maxval > 255 else np.uint8)


def preprocess_goldens():
    rng = np.random.default_rng(SEED)
    img_dir = os.path.join(OUT, "images")
    os.makedirs(img_dir, exist_ok=True)
    images = {
        "rgb_67x45": synthetic_image(rng, 45, 67, 3, 255),
        "gray_40x52": synthetic_image(rng, 52, 40, 1, 255),
        "rgba_50x50": synthetic_image(rng, 50, 50, 4, 255),
        "rgb16_36x30": synthetic_image(rng, 30, 36, 3, 65535),
        "rgb_20x14": synthetic_image(rng, 14, 20, 3, 255),
        "gray16_30x30": synthetic_image(rng, 30, 30, 1, 65535),
    }
    for stem, arr in images.items():
        with open(os.path.join(img_dir, stem + ".png"), "wb") as f:
            f.write(png_bytes(arr))

    t_sq = create_transform(input_size=(3, 32, 32), crop_pct=0.875, interpolation="bicubic")
    t_rect = create_transform(input_size=(3, 24, 40), crop_pct=0.875, interpolation="bilinear")
    t_gray = create_transform(input_size=(1, 32, 32), crop_pct=0.875, interpolation="bicubic",
                              mean=(0.5,), std=(0.25,))
    out = {}
    for stem in images:
        if stem == "gray16_30x30":
            continue  # PIL clips 16-bit grayscale; we scale (documented deviation)
        with Image.open(os.path.join(img_dir, stem + ".png")) as im:
            im.load()
            rgb = im.convert("RGB")
            out[f"{stem}/32x32"] = t_sq(rgb)
            if stem in ("rgb_67x45", "gray_40x52"):
                out[f"{stem}/24x40"] = t_rect(rgb)
            if stem in ("rgb_67x45", "gray_40x52"):
                out[f"{stem}/gray_32x32"] = t_gray(rgb.convert("L"))
    save("preprocess_golden.safetensors", out,
         {"mean": "0.485,0.456,0.406", "std": "0.229,0.224,0.225", "crop_pct": "0.875",
          "gray_mean": "0.5", "gray_std": "0.25", "pillow": Image.__version__,
          "timm": timm.__version__})


def official_writer_sample():
    """A tiny file written by the `safetensors` package itself (its ordering and alignment),
    with known values in every dtype the reader converts, plus an integer buffer."""
    from safetensors.torch import save_file
    tensors = {
        "f32": torch.arange(6, dtype=torch.float32).reshape(2, 3) - 2.5,
        "bf16": torch.tensor([1.0, -2.0, 0.5, 3.140625], dtype=torch.bfloat16),
        "f16": torch.tensor([1.0, -0.5, 65504.0], dtype=torch.float16),
        "i64": torch.tensor([7, -1], dtype=torch.int64),
    }
    path = os.path.join(OUT, "official_writer.safetensors")
    save_file(tensors, path, metadata={"format": "pt"})  # one key: deterministic order
    print(f"  official_writer.safetensors: {os.path.getsize(path)} bytes")


@torch.no_grad()
def self_check():
    """Reloads every weights file into a fresh model (strictly) and checks that it reproduces
    the stored logits exactly; the old Swin layout goes through timm's own checkpoint filter."""
    from timm.models.swin_transformer import checkpoint_filter_fn

    def load(name):
        return load_file(os.path.join(OUT, name))

    def as_f32(sd):
        return {k: v.float() if v.is_floating_point() else v for k, v in sd.items()}

    cases = [
        ("vit_timm", TimmViT, "input", "logits"),
        ("vit_timm_avg", TimmViT, "input", "logits"),
        ("vit_tv", TvViT, "input", "logits"),
        ("swin_timm", TimmSwin, "input", "logits"),
        ("swin_tv", TvSwin, "input", "logits"),
    ]
    for name, cls, x_key, y_key in cases:
        cfg = json.loads(load_metadata(name + ".safetensors")["golden_config"])
        model = cls(**cfg).eval()
        weights = as_f32(load(name + ".safetensors"))
        if name == "swin_tv":  # the buffers left out are recomputed by the model
            for k, v in model.state_dict().items():
                weights.setdefault(k, v)
        model.load_state_dict(weights, strict=True)
        io = load(name + "_io.safetensors")
        assert torch.equal(model(io[x_key].float()), io[y_key]), name
    cfg = json.loads(load_metadata("swin_timm.safetensors")["golden_config"])
    model = TimmSwin(**cfg).eval()
    model.load_state_dict(
        checkpoint_filter_fn(as_f32(load("swin_timm_old.safetensors")), model), strict=True)
    io = load("swin_timm_io.safetensors")
    assert torch.equal(model(io["input"].float()), io["logits"]), "swin_timm_old"
    print("  self-check: every weights file reproduces its logits exactly")


def load_metadata(name):
    from safetensors import safe_open
    with safe_open(os.path.join(OUT, name), "pt") as f:
        return f.metadata()


def main():
    os.makedirs(OUT, exist_ok=True)
    torch.manual_seed(SEED)
    torch.set_num_threads(1)  # fixed reduction order
    gen = torch.Generator().manual_seed(SEED)
    print(f"writing goldens to {OUT} (torch {torch.__version__}, timm {timm.__version__}, "
          f"torchvision {torchvision.__version__})")
    vit_timm(gen)
    vit_torchvision(gen)
    swin_timm(gen)
    swin_torchvision(gen)
    vit_s16_synth()
    preprocess_goldens()
    official_writer_sample()
    total = 0
    for root, _, files in os.walk(OUT):
        if os.path.relpath(root, OUT).startswith("encodings"):
            continue
        total += sum(os.path.getsize(os.path.join(root, f)) for f in files)
    print(f"total (without encodings/): {total} bytes")
    self_check()
    return 0


if __name__ == "__main__":
    sys.exit(main())
