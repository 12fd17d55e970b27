#!/usr/bin/env python3
"""PyTorch peer for `vitpe bench train --vs-torch`: one training step of the Fashion-MNIST ViT.

Same method as ../shared/peers/torch_train_bench.py: torchvision's VisionTransformer with the
vit-fmnist shape (28x28, 1 channel, patch 4, dim 128, depth 6, 4 heads, mlp 512, 10 classes,
learned 1D positions), AdamW at lr 1e-3, cross entropy on a random batch, 3 warm-up steps, the
median of REPS timed steps; then the median of REPS eval forwards without grad.
POOL is `token` (torchvision's class token, 50 tokens, the default) or `avg` (no class token,
49 tokens, the mean of the encoder's normalised outputs: the vit-fmnist preset's token count).
Prints one JSON object: {"train_ms": ..., "train_img_s": ..., "eval_img_s": ..., "torch": version}.
Runs with /usr/bin/python3 (Debian's python3-torch, `--vs-torch`) and with the PyTorch 2.x of
scripts/peers-setup's venv (`--vs-peers`); never needed by the tests.

usage: torch_train_peer.py THREADS BATCH REPS [POOL]
"""
import json
import statistics
import sys
import time

import torch
from torchvision.models.vision_transformer import VisionTransformer


class MeanPooledViT(VisionTransformer):
    """torchvision's ViT without the class token: 49 position rows, mean over the tokens."""

    def __init__(self, **kw):
        super().__init__(**kw)
        del self.class_token
        self.encoder.pos_embedding = torch.nn.Parameter(
            self.encoder.pos_embedding.detach()[:, 1:].clone())

    def forward(self, x):
        x = self.encoder(self._process_input(x))
        return self.heads(x.mean(dim=1))


def main():
    threads, batch, reps = (int(a) for a in sys.argv[1:4])
    pool = sys.argv[4] if len(sys.argv) > 4 else "token"
    if pool not in ("token", "avg"):
        sys.exit(f"POOL must be token or avg, found {pool!r}")
    torch.set_num_threads(threads)
    torch.manual_seed(0)
    cls = VisionTransformer if pool == "token" else MeanPooledViT
    m = cls(image_size=28, patch_size=4, num_layers=6, num_heads=4,
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
                      "eval_img_s": batch / ev, "torch": torch.__version__}), flush=True)


if __name__ == "__main__":
    main()
