#!/usr/bin/env python3
"""PyTorch peer for `vitpe bench --vs-torch`: the same model shapes, threads and batches.

Same method as ../shared/peers/torch_cpu_bench.py (torchvision/timm-shaped models, eager and
TorchScript-frozen, median of repeated runs after warm-up). Prints one JSON object per line:
{"model": ..., "batch": B, "mode": "eager"|"jit", "median_ms": ..., "img_s": ...}.
Run with /usr/bin/python3 (Debian's python3-torch); never needed by the tests.

usage: torch_peer_bench.py MODEL THREADS BATCHES REPS
  MODEL: vit-tiny-patch16-224 | vit-small-patch16-224 | vit-base-patch16-224 |
         swin-tiny-patch4-window7-224
"""
import json
import statistics
import sys
import time

import torch
import torchvision
from torchvision.models.vision_transformer import VisionTransformer


def build(name):
    vit = {"vit-tiny-patch16-224": (192, 3), "vit-small-patch16-224": (384, 6),
           "vit-base-patch16-224": (768, 12)}
    if name in vit:
        d, h = vit[name]
        return VisionTransformer(image_size=224, patch_size=16, num_layers=12, num_heads=h,
                                 hidden_dim=d, mlp_dim=4 * d, num_classes=1000)
    if name == "swin-tiny-patch4-window7-224":
        return torchvision.models.swin_t()
    raise SystemExit(f"torch peer: no PyTorch model for '{name}'")


def main():
    name, threads, batches, reps = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = build(name).eval()
    for batch in [int(b) for b in batches.split(",")]:
        x = torch.randn(batch, 3, 224, 224)
        for mode in ("eager", "jit"):
            with torch.no_grad():
                f = m
                if mode == "jit":
                    f = torch.jit.optimize_for_inference(torch.jit.freeze(torch.jit.trace(m, x)))
                for _ in range(2):
                    f(x)
                ts = []
                for _ in range(reps):
                    t0 = time.perf_counter()
                    f(x)
                    ts.append(time.perf_counter() - t0)
            med = statistics.median(ts)
            print(json.dumps({"model": name, "batch": batch, "mode": mode,
                              "median_ms": med * 1e3, "img_s": batch / med}), flush=True)


if __name__ == "__main__":
    main()
