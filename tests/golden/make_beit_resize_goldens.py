#!/usr/bin/env python3
"""Golden for relbias's `resize=beit`: timm's resize of BEiT relative position tables.

Calls timm.layers.pos_embed_rel.resize_rel_pos_bias_table as timm.models.beit's
checkpoint_filter_fn does (flat [L (+3), H] table, new window and new table shape, no
old_window_size: the source windows here are square) on seeded N(0, 1) tables. Without scipy
(TIMM_USE_SCIPY_INTERP unset, timm's default) that is unilm's geometric scheme: per axis, source
offsets spaced by a geometric progression whose ratio is found by bisection, target offsets the
integers, linear interpolation by timm's RegularGridInterpolator (border values held outside the
source offsets), the 3 class-token rows kept at the end. Cases:
  0: window 4x4 -> 6x4, 3 extra rows (BEiT's class entries), 2 heads (growing rows; the columns
     keep their size but are resampled too, as timm does once either axis changes)
  1: window 4x4 -> 7x7, no extra rows, 2 heads (target offsets beyond the source ones)
  2: window 7x7 -> 5x5, no extra rows, 2 heads (shrinking)

Writes tests/data/encodings/beit_resize_golden.safetensors (F32): for each case c, `c/in`
[L_old (+3), H] and `c/out` [L_new (+3), H]; one metadata entry (one, so that the file is
byte-reproducible) golden = JSON {"source": "timm <version> ...", "cases": [{"old": [Mh, Mw],
"new": [Mh, Mw], "extra": 0|3, "heads": H}, ...]}.

Run (never at test time), in the venv with timm 1.0.31, torch 2.15 and safetensors:
  /tmp/gold-venv/bin/python tests/golden/make_beit_resize_goldens.py
"""
import json
import os
import warnings

import torch
from safetensors.torch import save_file
import timm
from timm.layers import pos_embed_rel

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "encodings",
                   "beit_resize_golden.safetensors")
HEADS = 2
CASES = [((4, 4), (6, 4), 3), ((4, 4), (7, 7), 0), ((7, 7), (5, 5), 0)]

assert not pos_embed_rel._USE_SCIPY, "unset TIMM_USE_SCIPY_INTERP: the golden is timm's default"
warnings.filterwarnings("ignore", category=UserWarning)  # torch's notes on timm's indexing style

gen = torch.Generator().manual_seed(0)
tensors = {}
golden = {"source": f"timm {timm.__version__} layers.pos_embed_rel.resize_rel_pos_bias_table",
          "cases": []}
for c, (old, new, extra) in enumerate(CASES):
    rows = lambda w: (2 * w[0] - 1) * (2 * w[1] - 1) + extra
    table = torch.randn(rows(old), HEADS, generator=gen)
    out = pos_embed_rel.resize_rel_pos_bias_table(table, new_window_size=new,
                                                  new_bias_shape=(rows(new), HEADS))
    assert out.shape == (rows(new), HEADS), out.shape
    tensors[f"{c}/in"] = table.contiguous()
    tensors[f"{c}/out"] = out.detach().clone().contiguous()
    golden["cases"].append({"old": list(old), "new": list(new), "extra": extra, "heads": HEADS})
    print(f"case {c}: window {old} -> {new}, extra {extra}: table {tuple(table.shape)} -> "
          f"{tuple(out.shape)}")

save_file(tensors, OUT, metadata={"golden": json.dumps(golden)})
print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)")
