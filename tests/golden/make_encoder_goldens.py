#!/usr/bin/env python3
"""Parity goldens for the image-encoder families (tests/vit/models/test_encoders.cpp), timm 1.0.31:
DINOv2, CLIP and SigLIP image towers, small (img 32, patch 8, D 64, depth 2, heads 4) with the
structure of each family, and synthetic weights as in make_zoo_goldens.py (each tensor a function
of its timm name, tests/golden/synthetic_weights.h), so only the outputs are stored. For each,
at 32x32 (synthetic("input", [2, 3, 32, 32])) and at 48x32 (synthetic("input_48x32",
[1, 3, 48, 32]), pos_embed resampled by timm's dynamic_img_size):
  logits, logits_48x32          model(x): the head's output, or the pooled features without one
  pre_logits, pre_logits_48x32  model.forward_head(model.forward_features(x), pre_logits=True)
  tokens, tokens_48x32          model.forward_features(x): the final tokens after the norm

  dinov2          VisionTransformer(init_values=1e-5, num_classes=0): vit_*_patch14_dinov2
  dinov2_reg      + reg_tokens=4, no_embed_class=True, SwiGLUPacked MLP (act SiLU, the giant's)
  clip_quickgelu  pre_norm=True, LayerNorm eps 1e-5, act_layer='quick_gelu', a 10-wide head
                  (the projection): vit_*_clip_quickgelu_224
  siglip          class_token=False, global_pool='map' (AttentionPoolLatent), num_classes=0
  siglip_gap      class_token=False, global_pool='avg', fc_norm=False, num_classes=0,
                  qkv_bias=False (a ViT without qkv bias)
At the families' own patch sizes and resolutions (pre_logits and logits only, to keep files small):
  dinov2_p14      the dinov2 structure with patch 14 built for 518 (pos_embed 37 x 37): at 518
                  (synthetic("input_518", [1, 3, 518, 518])) and at 224 (synthetic("input_224",
                  [1, 3, 224, 224]), pos_embed resampled to 16 x 16): *_518, *_224
  siglip_p16      the siglip structure with patch 16 built for 224: at 224 and at 384
                  (synthetic("input_384", [1, 3, 384, 384])): *_224, *_384
DINOv3 (timm's Eva with rope_type 'dinov3', as vit_*_patch16_dinov3 builds it: class token, 4
register tokens, no position table, layer scale 1e-5, LayerNorm eps 1e-5, the normalised tokens
mean-pooled) at 32x32 (batch 2) and at two non-square sizes, 48x32 and 32x48
(synthetic("input_32x48", [1, 3, 32, 48])): tokens, pre_logits and logits at each:
  dinov3          qkv_bias=False, num_classes=0 (vit_*_patch16_dinov3)
  dinov3_qkvb     qkv_bias=True (q_bias and v_bias), a 10-wide head (a fine-tuned classifier)
Tooling only (the venv of scripts/peers-setup, or one with torch, timm, safetensors, numpy):
    /opt/vitpe-peers/bin/python tests/golden/make_encoder_goldens.py
"""
import os
from functools import partial

import torch
from timm.layers import SwiGLUPacked
from timm.models.eva import Eva
from timm.models.vision_transformer import VisionTransformer

import make_goldens
from make_goldens import save, synthetic
from make_zoo_goldens import metadata, synthesize

HERE = os.path.dirname(os.path.abspath(__file__))

BASE = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, dynamic_img_size=True)

VARIANTS = (
    ("dinov2", dict(init_values=1e-5, num_classes=0)),
    ("dinov2_reg", dict(init_values=1e-5, num_classes=0, reg_tokens=4, no_embed_class=True,
                        mlp_ratio=4.0, mlp_layer="SwiGLUPacked", act_layer="silu")),
    ("clip_quickgelu", dict(pre_norm=True, norm_layer="layernorm_eps5", act_layer="quick_gelu",
                            num_classes=10)),
    ("siglip", dict(class_token=False, global_pool="map", num_classes=0)),
    ("siglip_gap", dict(class_token=False, global_pool="avg", fc_norm=False, num_classes=0,
                        qkv_bias=False)),
)


def build(cfg):
    args = dict(cfg)
    if args.get("mlp_layer") == "SwiGLUPacked":
        args["mlp_layer"] = SwiGLUPacked
    if args.get("norm_layer") == "layernorm_eps5":
        args["norm_layer"] = partial(torch.nn.LayerNorm, eps=1e-5)
    return synthesize(VisionTransformer(**args))


@torch.no_grad()
def main():
    for name, extra in VARIANTS:
        cfg = dict(BASE, **extra)
        model = build(cfg)
        out = {}
        for suffix, x in (("", synthetic("input", [2, 3, 32, 32])),
                          ("_48x32", synthetic("input_48x32", [1, 3, 48, 32]))):
            tokens = model.forward_features(x)
            out["tokens" + suffix] = tokens
            out["pre_logits" + suffix] = model.forward_head(tokens, pre_logits=True)
            out["logits" + suffix] = model(x)
        save(f"{name}_synth_io.safetensors", out, metadata(model, cfg))
    for name, extra in (("dinov3", dict(qkv_bias=False, num_classes=0)),
                        ("dinov3_qkvb", dict(qkv_bias=True, num_classes=10))):
        cfg = dict(BASE, init_values=1e-5, rope_type="dinov3", rope_temperature=100,
                   rope_rotate_half=True, use_rot_pos_emb=True, use_abs_pos_emb=False,
                   num_reg_tokens=4, use_fc_norm=False, **extra)
        model = synthesize(Eva(**dict(cfg, norm_layer=partial(torch.nn.LayerNorm, eps=1e-5))))
        cfg["norm_layer"] = "layernorm_eps5"
        out = {}
        for suffix, x in (("", synthetic("input", [2, 3, 32, 32])),
                          ("_48x32", synthetic("input_48x32", [1, 3, 48, 32])),
                          ("_32x48", synthetic("input_32x48", [1, 3, 32, 48]))):
            tokens = model.forward_features(x)
            out["tokens" + suffix] = tokens
            out["pre_logits" + suffix] = model.forward_head(tokens, pre_logits=True)
            out["logits" + suffix] = model(x)
        save(f"{name}_synth_io.safetensors", out, metadata(model, cfg))
    native = (
        ("dinov2_p14", dict(img_size=518, patch_size=14, init_values=1e-5, num_classes=0),
         (518, 224)),
        ("siglip_p16", dict(img_size=224, patch_size=16, class_token=False, global_pool="map",
                            num_classes=0), (224, 384)),
    )
    for name, extra, sizes in native:
        cfg = dict(BASE, **extra)
        model = build(cfg)
        out = {}
        for size in sizes:
            x = synthetic(f"input_{size}", [1, 3, size, size])
            out[f"pre_logits_{size}"] = model.forward_head(model.forward_features(x),
                                                           pre_logits=True)
            out[f"logits_{size}"] = model(x)
        save(f"{name}_synth_io.safetensors", out, metadata(model, cfg))


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    make_goldens.OUT = os.path.join(HERE, "..", "data", "zoo")
    main()
