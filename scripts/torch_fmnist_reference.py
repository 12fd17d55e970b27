#!/usr/bin/env python3
"""PyTorch reference run of `vitpe train` on Fashion-MNIST: the same model, recipe and data.

Answers "does vitpe's trainer learn as fast as PyTorch does with the same settings?": compare
its per-epoch test accuracy with the `"type":"epoch"` lines of a vitpe run's metrics.jsonl.
The model is timm's VisionTransformer in the vit-fmnist shape (28x28, 1 channel, patch 4,
D 128, depth 6, 4 heads, MLP 512, pre-norm, timm's initialisation, as vitpe's; global average
pooling without a class token, as the preset, or `--pool token` for the class-token model of
runs A-C in docs/results/fashion-mnist-training.md) with a fixed 2D sin-cos position table
(vitpe's `sincos2d`, MAE layout, class row zero).
Recipe as `vitpe train`: AdamW (betas 0.9/0.999, eps 1e-8, no weight decay on norms, biases,
class token and positions), per-step linear warmup then cosine to --min-lr, label smoothing,
global gradient-norm clipping, shuffled batches with the last partial batch dropped, no
augmentation (as `vitpe train --no-augment`). Seeds differ from vitpe's, so compare curves,
not digits.

Run with /usr/bin/python3 (Debian's python3-torch + pip timm); never needed by the tests.
Prints one JSON line per epoch: {"epoch", "test_acc", "train_acc", "train_loss", "seconds"}.

usage: torch_fmnist_reference.py [--epochs 15] [--stop-after N] [--lr 2e-3] [--threads 2] ...
"""
import argparse
import gzip
import json
import math
import time

import numpy as np
import timm
import torch
import torch.nn.functional as F


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    ndim = data[3]
    dims = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(ndim)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(f"{data_dir}/{prefix}-images-idx3-ubyte.gz").astype(np.float32) / 255.0
    y = read_idx(f"{data_dir}/{prefix}-labels-idx1-ubyte.gz").astype(np.int64)
    x = (x - 0.2860) / 0.3530  # vit-fmnist's mean and std
    return torch.from_numpy(x).unsqueeze(1), torch.from_numpy(y)


def sincos2d_table(dim, rows, cols, prefix, temperature=10000.0):
    p = dim // 4
    w = temperature ** (-np.arange(p, dtype=np.float64) / p)
    t = np.zeros((prefix + rows * cols, dim), dtype=np.float64)
    for n in range(rows * cols):
        y, x = divmod(n, cols)
        t[prefix + n] = np.concatenate([np.sin(x * w), np.cos(x * w), np.sin(y * w), np.cos(y * w)])
    return torch.from_numpy(t.astype(np.float32)).unsqueeze(0)


def lr_at(step, base, min_lr, warmup, total):
    if step < warmup:
        return base * (step + 1) / warmup
    t = min(1.0, (step - warmup) / max(1, total - warmup))
    return min_lr + (base - min_lr) * 0.5 * (1.0 + math.cos(math.pi * t))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--epochs", type=int, default=15, help="length of the schedule")
    ap.add_argument("--stop-after", type=int, default=0, help="stop after N epochs (0: all)")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--min-lr", type=float, default=1e-5)
    ap.add_argument("--warmup", type=float, default=1.0, help="warmup length in epochs")
    ap.add_argument("--wd", type=float, default=0.05)
    ap.add_argument("--smoothing", type=float, default=0.1)
    ap.add_argument("--clip", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--pool", choices=("avg", "token"), default="avg",
                    help="avg: mean of the patch tokens, no class token (the vit-fmnist preset); "
                         "token: a class token (the preset before run D)")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    xtr, ytr = load(a.data_dir, "train")
    xte, yte = load(a.data_dir, "test")

    m = timm.models.vision_transformer.VisionTransformer(
        img_size=28, patch_size=4, in_chans=1, num_classes=10, embed_dim=128, depth=6,
        num_heads=4, mlp_ratio=4.0, class_token=a.pool == "token", global_pool=a.pool)
    with torch.no_grad():
        m.pos_embed.copy_(sincos2d_table(128, 7, 7, 1 if a.pool == "token" else 0))
    m.pos_embed.requires_grad_(False)

    decay, no_decay = [], []
    for name, p in m.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 or name in ("cls_token", "pos_embed") else decay).append(p)
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": a.wd},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=a.lr, betas=(0.9, 0.999), eps=1e-8)

    per_epoch = len(xtr) // a.batch
    warmup, total = round(a.warmup * per_epoch), a.epochs * per_epoch
    gen = torch.Generator().manual_seed(a.seed)
    step = 0
    for epoch in range(1, (a.stop_after or a.epochs) + 1):
        t0 = time.time()
        m.train()
        order = torch.randperm(len(xtr), generator=gen)
        correct, loss_sum = 0, 0.0
        for b in range(per_epoch):
            idx = order[b * a.batch:(b + 1) * a.batch]
            for g in opt.param_groups:
                g["lr"] = lr_at(step, a.lr, a.min_lr, warmup, total)
            logits = m(xtr[idx])
            loss = F.cross_entropy(logits, ytr[idx], label_smoothing=a.smoothing)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if a.clip > 0:
                torch.nn.utils.clip_grad_norm_(m.parameters(), a.clip)
            opt.step()
            step += 1
            loss_sum += loss.item()
            correct += (logits.argmax(1) == ytr[idx]).sum().item()
        m.eval()
        test_correct = 0
        with torch.no_grad():
            for b in range(0, len(xte), 500):
                test_correct += (m(xte[b:b + 500]).argmax(1) == yte[b:b + 500]).sum().item()
        print(json.dumps({"epoch": epoch, "test_acc": test_correct / len(xte),
                          "train_acc": correct / (per_epoch * a.batch),
                          "train_loss": loss_sum / per_epoch,
                          "seconds": round(time.time() - t0, 1)}), flush=True)


if __name__ == "__main__":
    main()
