#!/usr/bin/env python3
"""PyTorch peer for `vitpe bench train --vs-torch`: one training step of the Fashion-MNIST ViT.

Same method as ../shared/peers/torch_train_bench.py: torchvision's VisionTransformer with the
vit-fmnist shape (28x28, 1 channel, patch 4, dim 128, depth 6, 4 heads, mlp 512, 10 classes,
class token, learned 1D positions), AdamW at lr 1e-3, cross entropy on a random batch, 3 warm-up
steps, the median of REPS timed steps; then the median of REPS eval forwards without grad.
Prints one JSON object: {"train_ms": ..., "train_img_s": ..., "eval_img_s": ...}.
Run with /usr/bin/python3 (Debian's python3-torch); never needed by the tests.

usage: torch_train_peer.py THREADS BATCH REPS
"""
import json
import statistics
import sys
import time

import torch
from torchvision.models.vision_transformer import VisionTransformer


def main():
    threads, batch, reps = (int(a) for a in sys.argv[1:4])
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    m = VisionTransformer(image_size=28, patch_size=4, num_layers=6, num_heads=4,
                          hidden_dim=128, mlp_dim=512, num_classes=10)
    m.conv_proj = torch.nn.Conv2d(1, 128, 4, 4)
    opt = torch.optim.AdamW(m.parameters(), lr=1e-3)
    x = torch.randn(batch, 1, 28, 28)
    y = torch.randint(0, 10, (batch,))

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(m(x), y)
        loss.backward()
        opt.step()

    for _ in range(3):
        step()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        step()
        ts.append(time.perf_counter() - t0)
    train = statistics.median(ts)
    m.eval()
    with torch.no_grad():
        m(x)
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            m(x)
            ts.append(time.perf_counter() - t0)
    ev = statistics.median(ts)
    print(json.dumps({"train_ms": train * 1e3, "train_img_s": batch / train,
                      "eval_img_s": batch / ev}), flush=True)


if __name__ == "__main__":
    main()
