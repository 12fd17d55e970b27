#!/usr/bin/env python3
"""Golden for the `cpb` encoding: Swin V2's continuous position bias as timm computes it.

Builds timm's swin_transformer_v2.WindowAttention(dim=12, num_heads=3) for windows (3, 5) and
(4, 4), each with pretrained_window_size (0, 0) and (6, 6), replaces its cpb_mlp by one of the
same structure but hidden width 16 (Linear(2, 16), ReLU, Linear(16, 3, bias=False); the bias
does not depend on the width, only the file's size does) with seeded random weights (larger
than timm's init, so the bias spreads over (0, 16)), runs WindowAttention.forward and records
the bias it adds to the logits, 16 * sigmoid(cpb_mlp(relative_coords_table))[index], [H, N, N].

Writes tests/data/encodings/cpb_golden.safetensors (F32), for each case c in 0..3:
  c/attn.cpb_mlp.0.weight [16, 2], c/attn.cpb_mlp.0.bias [16], c/attn.cpb_mlp.2.weight [3, 16],
  c/bias [3, N, N]; one metadata entry (one, so that the file is byte-reproducible: safetensors
  writes several in any order) golden = JSON {"source": "timm <version> ...", "cases": [{"window":
  [Mh, Mw], "pretrained_window_size": [Rh, Rw], "heads": 3, "hidden": 16}, ...]}.

Run (never at test time), in the venv with timm 1.0.31, torch 2.15 and safetensors:
  /tmp/gold-venv/bin/python tests/golden/make_cpb_goldens.py
"""
import json
import os

import torch
from safetensors.torch import save_file
import timm
from timm.models import swin_transformer_v2 as swin2

OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "data", "encodings",
                   "cpb_golden.safetensors")
DIM, HEADS, HIDDEN = 12, 3, 16
CASES = [((3, 5), (0, 0)), ((3, 5), (6, 6)), ((4, 4), (0, 0)), ((4, 4), (6, 6))]


def forward_bias(attn, n):
    """The bias WindowAttention.forward adds to the logits: it is 16 * torch.sigmoid(...), the
    only sigmoid of the forward, so the sigmoid's output is recorded while forward runs."""
    seen = []
    sigmoid = torch.sigmoid

    def recording(x):
        y = sigmoid(x)
        seen.append(y)
        return y

    torch.sigmoid = recording
    try:
        with torch.no_grad():
            attn(torch.randn(1, n, DIM))
    finally:
        torch.sigmoid = sigmoid
    assert len(seen) == 1 and seen[0].shape == (HEADS, n, n), [s.shape for s in seen]
    return 16 * seen[0]


torch.manual_seed(0)
tensors = {}
golden = {"source": f"timm {timm.__version__} swin_transformer_v2.WindowAttention", "cases": []}
for c, (window, pretrained) in enumerate(CASES):
    attn = swin2.WindowAttention(dim=DIM, window_size=window, num_heads=HEADS,
                                 pretrained_window_size=pretrained).eval()
    attn.cpb_mlp = torch.nn.Sequential(torch.nn.Linear(2, HIDDEN), torch.nn.ReLU(inplace=True),
                                       torch.nn.Linear(HIDDEN, HEADS, bias=False))
    with torch.no_grad():
        attn.cpb_mlp[0].weight.normal_(0, 1.0)
        attn.cpb_mlp[0].bias.normal_(0, 0.5)
        attn.cpb_mlp[2].weight.normal_(0, 0.5)
    n = window[0] * window[1]
    bias = forward_bias(attn, n)
    for name, p in attn.cpb_mlp.named_parameters():
        tensors[f"{c}/attn.cpb_mlp.{name}"] = p.detach().clone().contiguous()
    tensors[f"{c}/bias"] = bias.detach().clone().contiguous()
    golden["cases"].append({"window": list(window), "pretrained_window_size": list(pretrained),
                            "heads": HEADS, "hidden": HIDDEN})
    print(f"case {c}: window {window}, pretrained {pretrained}: bias in "
          f"[{bias.min():.3f}, {bias.max():.3f}]")

save_file(tensors, OUT, metadata={"golden": json.dumps(golden)})
print(f"wrote {os.path.normpath(OUT)} ({os.path.getsize(OUT)} bytes)")
