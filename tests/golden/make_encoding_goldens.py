#!/usr/bin/env python3
"""Goldens for tests/encodings: PyTorch/timm outputs the C++ encodings must reproduce.

Writes tests/data/encodings/<name>.bin (raw little-endian float32, C order) and
tests/data/encodings/goldens.json ({name: {"shape": [...], "file": "<name>.bin"}, "meta": {...}}).

  - resample_*: F.interpolate(x, size, mode, align_corners=False, antialias=...) on planes [C, H, W]
    (bicubic and bilinear, with and without antialias, up, down and mixed, non-square).
  - learned1d_*: timm.layers.resample_abs_pos_embed (bicubic, antialias=True, class row kept),
    non-square old and new grids.
  - relbias_*: a (2Mh-1)(2Mw-1)+3 x H table resampled as our relbias does: main rows as H planes,
    F.interpolate bicubic antialias=True, the 3 class-token rows kept.
  - sincos2d_timm: timm.layers.build_sincos2d_pos_embed; sincos2d_mae: MAE's numpy
    get_2d_sincos_pos_embed (copied below, generalised to rows != cols), class row zero.
  - rope_axial_*: timm's RotaryEmbeddingCat(dim=head_dim, temperature=100, in_pixels=False,
    grid_indexing='xy') + apply_rot_embed_cat(half=False): the rope of timm's Eva
    vit_*_rope_* (axial RoPE-ViT) models (timm 1.0.x; skipped when missing).
  - rope_mixed_*: timm's RoPE-Mixed helpers (init_random_2d_freqs, get_mixed_grid 'xy',
    get_mixed_freqs, apply_rot_embed_cat(half=False)), as used by timm's Eva
    vit_*_rope_mixed_* models. timm 0.9.16 does not have them (they arrived with the RoPE-ViT
    models in timm 1.0.x); with such a timm this golden is skipped and the script says so.
  - rope_dinov3_*: timm's RotaryEmbeddingDinoV3(dim=head_dim, temperature=100, rotate_half=True)
    + apply_rot_embed_cat(half=True), the rope of timm's Eva vit_*_patch16_dinov3, at 3x5 and
    at 6x4 (its coordinates normalised on each grid).

Run (never at test time):
  /usr/bin/python3 -m pip install --break-system-packages --no-deps timm safetensors
  /usr/bin/python3 tests/golden/make_encoding_goldens.py
Verified with torch 1.13 (Debian) and timm 1.0.31.
"""
import json
import os

import numpy as np
import torch
import torch.nn.functional as F
import timm
from timm.layers import resample_abs_pos_embed, build_sincos2d_pos_embed

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "encodings")
index = {}


def save(name, t):
    a = np.ascontiguousarray(t.detach().cpu().numpy() if torch.is_tensor(t) else t, dtype="<f4")
    with open(os.path.join(OUT, name + ".bin"), "wb") as f:
        f.write(a.tobytes())
    index[name] = {"shape": list(a.shape), "file": name + ".bin"}


torch.manual_seed(0)

# ---- resample ------------------------------------------------------------------------------------
cases = [
    ("bicubic", True, (7, 9), (12, 5)),
    ("bicubic", True, (14, 14), (24, 24)),
    ("bicubic", True, (24, 20), (7, 9)),
    ("bilinear", True, (7, 9), (12, 5)),
    ("bilinear", True, (10, 6), (4, 15)),
    ("bicubic", False, (7, 9), (12, 5)),
    ("bicubic", False, (5, 6), (11, 3)),
    ("bilinear", False, (7, 9), (12, 5)),
]
for i, (mode, aa, (h, w), (oh, ow)) in enumerate(cases):
    x = torch.randn(3, h, w)
    y = F.interpolate(x[None], size=(oh, ow), mode=mode, align_corners=False, antialias=aa)[0]
    save(f"resample_{i}_in", x)
    save(f"resample_{i}_out", y)
    index[f"resample_{i}_in"]["meta"] = {"mode": mode, "antialias": aa, "out": [oh, ow]}

# ---- learned1d: timm's resample_abs_pos_embed -------------------------------------------------------
for i, (old, new, prefix) in enumerate([((6, 8), (10, 5), 1), ((14, 14), (9, 12), 1),
                                        ((5, 7), (8, 11), 0)]):
    pe = torch.randn(1, prefix + old[0] * old[1], 16) * 0.02
    out = resample_abs_pos_embed(pe, new_size=list(new), old_size=list(old),
                                 num_prefix_tokens=prefix)
    save(f"learned1d_{i}_in", pe)
    save(f"learned1d_{i}_out", out)
    index[f"learned1d_{i}_in"]["meta"] = {"old": list(old), "new": list(new), "prefix": prefix}

# ---- relbias: bicubic antialias on the (2M-1) x (2M-1) planes, class rows kept ----------------------
for i, (old, new) in enumerate([((4, 5), (6, 3)), ((7, 7), (12, 12))]):
    heads = 3
    L = (2 * old[0] - 1) * (2 * old[1] - 1)
    table = torch.randn(L + 3, heads) * 0.02
    planes = table[:L].t().reshape(1, heads, 2 * old[0] - 1, 2 * old[1] - 1)
    dst = (2 * new[0] - 1, 2 * new[1] - 1)
    res = F.interpolate(planes, size=dst, mode="bicubic", align_corners=False, antialias=True)
    out = torch.cat([res.reshape(heads, -1).t(), table[L:]], dim=0)
    save(f"relbias_{i}_in", table)
    save(f"relbias_{i}_out", out)
    index[f"relbias_{i}_in"]["meta"] = {"old": list(old), "new": list(new), "heads": heads}

# ---- sincos2d ------------------------------------------------------------------------------------------
rows, cols, dim = 5, 7, 16
save("sincos2d_timm", build_sincos2d_pos_embed([rows, cols], dim=dim, temperature=10000.0))


# MAE (facebookresearch/mae util/pos_embed.py), generalised to grid_h != grid_w.
def get_1d_sincos_pos_embed_from_grid(embed_dim, pos):
    omega = np.arange(embed_dim // 2, dtype=np.float64)
    omega /= embed_dim / 2.0
    omega = 1.0 / 10000 ** omega
    pos = pos.reshape(-1)
    out = np.einsum("m,d->md", pos, omega)
    return np.concatenate([np.sin(out), np.cos(out)], axis=1)


def get_2d_sincos_pos_embed(embed_dim, grid_h_size, grid_w_size, cls_token=False):
    grid_h = np.arange(grid_h_size, dtype=np.float32)
    grid_w = np.arange(grid_w_size, dtype=np.float32)
    grid = np.meshgrid(grid_w, grid_h)  # here w goes first
    grid = np.stack(grid, axis=0).reshape([2, 1, grid_h_size, grid_w_size])
    emb_h = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[0])  # uses grid[0] = w
    emb_w = get_1d_sincos_pos_embed_from_grid(embed_dim // 2, grid[1])
    pos_embed = np.concatenate([emb_h, emb_w], axis=1)
    if cls_token:
        pos_embed = np.concatenate([np.zeros([1, embed_dim]), pos_embed], axis=0)
    return pos_embed


save("sincos2d_mae", get_2d_sincos_pos_embed(dim, rows, cols, cls_token=True))
index["sincos2d_mae"]["meta"] = {"rows": rows, "cols": cols, "dim": dim, "prefix": 1}

# ---- RoPE-Mixed -------------------------------------------------------------------------------------------
try:
    from timm.layers.pos_embed_sincos import (init_random_2d_freqs, get_mixed_grid,
                                              get_mixed_freqs, apply_rot_embed_cat)
except ImportError:
    print(f"timm {timm.__version__} has no RoPE-Mixed helpers: rope_mixed goldens skipped")
else:
    heads, hd, rows, cols, B, prefix = 3, 16, 4, 6, 2, 1
    freqs = init_random_2d_freqs(hd, 1, heads, temperature=10.0, rotate=True)[:, 0]  # [2, H, hd/2]
    t_x, t_y = get_mixed_grid([rows, cols], grid_indexing="xy")
    rope = get_mixed_freqs(freqs, t_x, t_y)  # [H, N, 2 hd]
    q = torch.randn(B, heads, prefix + rows * cols, hd)
    k = torch.randn(B, heads, prefix + rows * cols, hd)
    rot = lambda x: torch.cat([x[:, :, :prefix], apply_rot_embed_cat(x[:, :, prefix:], rope)], 2)
    save("rope_mixed_freqs", freqs)
    save("rope_mixed_q", q)
    save("rope_mixed_k", k)
    save("rope_mixed_q_rot", rot(q))
    save("rope_mixed_k_rot", rot(k))
    index["rope_mixed_q"]["meta"] = {"rows": rows, "cols": cols, "prefix": prefix}

# ---- RoPE-Axial -------------------------------------------------------------------------------------------
try:
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, apply_rot_embed_cat
except ImportError:
    print(f"timm {timm.__version__} has no RotaryEmbeddingCat: rope_axial goldens skipped")
else:
    heads, hd, rows, cols, prefix = 2, 16, 3, 5, 1
    rope = RotaryEmbeddingCat(dim=hd, temperature=100.0, in_pixels=False, feat_shape=[rows, cols],
                              grid_indexing="xy").get_embed()  # [N, 2 hd]
    q = torch.randn(1, heads, prefix + rows * cols, hd)
    save("rope_axial_q", q)
    save("rope_axial_q_rot",
         torch.cat([q[:, :, :prefix], apply_rot_embed_cat(q[:, :, prefix:], rope)], 2))
    index["rope_axial_q"]["meta"] = {"rows": rows, "cols": cols, "prefix": prefix}

try:
    from timm.layers.pos_embed_sincos import RotaryEmbeddingDinoV3
except ImportError:
    print(f"timm {timm.__version__} has no RotaryEmbeddingDinoV3: rope_dinov3 goldens skipped")
else:
    # DINOv3's RoPE as timm's Eva vit_*_patch16_dinov3 builds it (temperature 100, 'separate'
    # normalisation, 'ij', rotate_half), on its own grid and on a larger non-square one.
    heads, hd, prefix = 2, 16, 5
    for name, (rows, cols) in (("rope_dinov3_q", (3, 5)), ("rope_dinov3_q_6x4", (6, 4))):
        rope = RotaryEmbeddingDinoV3(dim=hd, temperature=100.0, feat_shape=[3, 5],
                                     rotate_half=True).eval().get_embed(shape=[rows, cols])
        q = torch.randn(1, heads, prefix + rows * cols, hd)
        save(name, q)
        save(name + "_rot", torch.cat(
            [q[:, :, :prefix], apply_rot_embed_cat(q[:, :, prefix:], rope, half=True)], 2))
        index[name]["meta"] = {"rows": rows, "cols": cols, "prefix": prefix}

index["meta"] = {"torch": torch.__version__, "timm": timm.__version__}
with open(os.path.join(OUT, "goldens.json"), "w") as f:
    json.dump(index, f, indent=1, sort_keys=True)
print("wrote", len(index) - 1, "goldens to", os.path.normpath(OUT))
