#!/usr/bin/env python3
"""PyTorch peer for `vitpe bench attention --device cuda` (run by tests/cuda/device_check.sh).

Times torch.nn.functional.scaled_dot_product_attention in bf16 on the same shapes with the same
kind of additive bias tensor (what PyTorch needs for relative-position bias and Swin's mask:
FlashAttention takes no arbitrary bias), and without a bias, then prints them beside vitpe's
rows (read from the JSON that `vitpe bench attention --json` wrote) with ratios.
Optionally (--models) times torchvision's vit_b_16 and swin_t forward in bf16 (random weights,
no download) at --batch, the peer of the end-to-end rows.
"""
import argparse
import json
import sys

import torch
import torch.nn.functional as F


def time_ms(fn, reps):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(3):
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        torch.cuda.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


def sdpa(q, k, v, attn_mask=None):
    """torch >= 2.0: scaled_dot_product_attention; older torch: the eager composition."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
    s = (q @ k.transpose(-2, -1)) * q.shape[-1] ** -0.5
    if attn_mask is not None:
        s = s + attn_mask
    return s.softmax(-1) @ v


def attention_rows(batch, swin_images, reps):
    dev, dt = "cuda", torch.bfloat16
    g = torch.Generator(device=dev).manual_seed(0)
    rows = {}
    # ViT-B/16: [B, 12, 197, 64], bias [1, 12, 197, 197] broadcast over the batch.
    B, H, N, hd = batch, 12, 197, 64
    q, k, v = (torch.randn(B, H, N, hd, device=dev, dtype=dt, generator=g) for _ in range(3))
    bias = torch.randn(1, H, N, N, device=dev, dtype=dt, generator=g) * 0.02
    rows["vit-b16"] = {
        "sdpa_bias": time_ms(lambda: sdpa(q, k, v, attn_mask=bias), reps),
        "sdpa_none": time_ms(lambda: sdpa(q, k, v), reps),
        "flops": 4.0 * B * H * N * N * hd,
    }
    del q, k, v, bias
    # Swin-T stage 1: 64 windows of 7x7 per image, 3 heads, hd 32; relbias + shift mask combined
    # per (window, head) as timm does: attn.view(B/nW, nW, H, N, N) + mask -> one tensor
    # [1, nW*H, N, N] broadcast over the images (q laid out as [images, nW*H, N, hd]).
    nW, H, N, hd = 64, 3, 49, 32
    q, k, v = (torch.randn(swin_images, nW * H, N, hd, device=dev, dtype=dt, generator=g)
               for _ in range(3))
    bias = torch.randn(1, nW * H, N, N, device=dev, dtype=dt, generator=g)
    rows["swin-t-stage1"] = {
        "sdpa_bias": time_ms(lambda: sdpa(q, k, v, attn_mask=bias), reps),
        "sdpa_none": time_ms(lambda: sdpa(q, k, v), reps),
        "flops": 4.0 * swin_images * nW * H * N * N * hd,
    }
    return rows


def model_rows(batch, reps):
    try:
        import torchvision
    except Exception as e:  # noqa: BLE001 - report and go on
        print(f"torchvision not importable ({e}): model peer skipped")
        return {}
    out = {}
    x = torch.randn(batch, 3, 224, 224, device="cuda", dtype=torch.bfloat16)
    for name, ctor in (("vit-base-patch16-224", torchvision.models.vit_b_16),
                       ("swin-tiny-patch4-window7-224", torchvision.models.swin_t)):
        m = ctor().cuda().to(torch.bfloat16).eval()
        with torch.inference_mode():
            out[name] = time_ms(lambda: m(x), max(3, reps // 4))
        del m
    return out


def print_table(torch_rows, ours):
    """torch_rows: {shape: {sdpa_bias, sdpa_none, flops}}; ours: vitpe's JSON rows."""

    def vitpe_ms(model, dtype, key):
        for r in ours:
            if r["model"] == model and r["dtype"] == dtype and key in r["variant"]:
                return r["ms"]
        return None

    def fmt(v):
        return f"{v:.4f}" if v is not None else "n/a"

    print("\nattention, bf16 (ms per call; speedup = torch SDPA with bias / vitpe in-kernel)")
    print(f"{'shape':<15}{'vitpe in-kernel':>16}{'vitpe dense':>13}{'SDPA+bias':>11}"
          f"{'SDPA no bias':>14}{'speedup':>9}{'TFLOP/s':>9}")
    for model, t in torch_rows.items():
        ink = vitpe_ms(model, "bf16", "in-kernel")
        dense = vitpe_ms(model, "bf16", "dense")
        speed = f"{t['sdpa_bias'] / ink:.2f}x" if ink else "n/a"
        tf = f"{t['flops'] / (ink * 1e-3) / 1e12:.1f}" if ink else "n/a"
        print(f"{model:<15}{fmt(ink):>16}{fmt(dense):>13}{t['sdpa_bias']:>11.4f}"
              f"{t['sdpa_none']:>14.4f}{speed:>9}{tf:>9}")
    print("target: attention with relative bias >= 1.5x SDPA with a bias tensor")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vitpe-json", help="rows written by `vitpe bench attention --json`")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--swin-images", type=int, default=64)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--models", action="store_true", help="also time torchvision ViT-B/16, Swin-T")
    a = ap.parse_args()
    if not torch.cuda.is_available():
        print("PyTorch has no CUDA device here: peer skipped")
        return 0
    print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}"
          + ("" if hasattr(F, "scaled_dot_product_attention") else
             " (no SDPA in this torch: eager softmax(q k^T + bias) v instead)"))
    torch_rows = attention_rows(a.batch, a.swin_images, a.reps)

    ours = []
    if a.vitpe_json:
        with open(a.vitpe_json) as f:
            ours = json.load(f)
    print_table(torch_rows, ours)

    if a.models:
        m = model_rows(a.batch, a.reps)
        if m:
            print(f"\nPyTorch eager bf16 models, batch {a.batch} (ms per forward):")
            for name, ms in m.items():
                print(f"  {name:<30}{ms:10.2f}   ({a.batch / ms * 1e3:.0f} img/s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
