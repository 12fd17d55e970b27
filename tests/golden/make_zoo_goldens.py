#!/usr/bin/env python3
"""Parity goldens for the timm model-zoo families (tests/vit/io/test_zoo.cpp), timm 1.0.31.

Every model gets synthetic weights: each tensor is a function of its timm name
(tests/golden/synthetic_weights.h, `synthetic` in make_goldens.py), as are the inputs, so only
the logits are stored and the test rebuilds the checkpoint under timm's names. Each file's
`__metadata__` has `state_dict_fnv1a64` (fnv1a64 of the state dict's sorted `name:d0xd1...`
lines: the test checks that the file it writes is timm's state dict) and `golden_config` (the
timm constructor arguments).

  zoo/deit3_synth_io.safetensors
      timm VisionTransformer(img 32, patch 8, D 64, depth 2, heads 4, 10 classes,
      no_embed_class=True, init_values=1e-6, dynamic_img_size=True): DeiT-III's structure
      (deit3_* in timm: layer scale ls1/ls2.gamma, pos_embed [1, 16, 64] without a class row).
      logits [2, 10] of synthetic("input", [2, 3, 32, 32]); logits_48x32 [1, 10] of
      synthetic("input_48x32", [1, 3, 48, 32]) (pos_embed resampled by timm, 4x4 -> 6x4).

  zoo/reg_cls_synth_io.safetensors
      the same with reg_tokens=4, class token and class-token pooling, pos_embed WITH the five
      prefix rows (no_embed_class=False), no layer scale: logits, logits_48x32.
  zoo/reg_gap_synth_io.safetensors
      timm's vit_*_reg4_gap_256 structure: class_token=False, reg_tokens=4, no_embed_class=True,
      global_pool='avg' (fc_norm), init_values=1e-5: logits, logits_48x32.

  zoo/deit_dist_synth_io.safetensors
      timm VisionTransformerDistilled (deit_*_distilled_*): class and distillation tokens
      (pos_embed with both rows), head and head_dist; eval mode returns the mean of the heads:
      logits, logits_48x32.

  zoo/beit_synth_io.safetensors, zoo/beit_48x32_synth_io.safetensors
      timm Beit(img 32 / img (48, 32), patch 8, D 64, depth 2, heads 4, 10 classes,
      use_abs_pos_emb=False, use_rel_pos_bias=True, init_values=0.1): q_bias and v_bias (no k
      bias), per-block relative_position_bias_table with BEiT's three class entries,
      gamma_1/gamma_2, mean pooling with fc_norm: logits of synthetic("input", [2, 3, 32, 32])
      and of synthetic("input_48x32", [1, 3, 48, 32]) by the model built for that size; and
      logits_48x32_resized: the 32x32 weights at 48x32 as timm loads a checkpoint at another
      size (checkpoint_filter_fn: resize_rel_pos_bias_table, unilm's geometric interpolation;
      vitpe's relbias:resize=beit).

  zoo/eva_rope_synth_io.safetensors
      timm Eva(img 32, patch 8, D 64, depth 2, heads 4, 10 classes, attn_type='rope',
      global_pool='token' (class token, final norm), init_values=1e-5, use_abs_pos_emb=False, use_rot_pos_emb=True, rope_grid_indexing='xy',
      rope_temperature=100, dynamic_img_size=True): timm's vit_*_patch16_rope_224 structure
      (RoPE-ViT axial; gamma_1/gamma_2; no position tensor in the file): logits, logits_48x32.
  zoo/eva_rope_mixed_ape_synth_io.safetensors
      the same with rope_type='mixed', rope_temperature=10, use_abs_pos_emb=True,
      no_embed_class=True (vit_*_patch16_rope_mixed_ape_224: one rope.freqs [2, depth, H, hd/2]
      and a position table without a class row): logits, logits_48x32.
  zoo/eva_reg_gap_synth_io.safetensors
      timm's vit_*_patch16_rope_reg1_gap_256 structure: Eva(class_token=False, num_reg_tokens=1,
      global_pool='avg', attn_type='eva' (q_bias, v_bias), rope_type='cat' with timm's defaults
      (grid_indexing 'ij', temperature 10000) and ref_feat_shape=(4, 4), init_values=1e-5,
      dynamic_img_size=True): logits, logits_48x32 (coordinates rescaled: rows x 4/6).

  zoo/eva02_glu_synth_io.safetensors
      timm's EVA-02 tiny/small structure: Eva(img 32, patch 8, D 64, depth 2, heads 4,
      10 classes, mlp_ratio 8/3, swiglu_mlp=True (GluMlp: fc1 [340, 64], gate half first),
      q_bias/v_bias, pos_embed with the class row, mean pooling with fc_norm, axial RoPE with
      Eva's defaults and ref_feat_shape=(4, 4), dynamic_img_size=True): logits, logits_48x32.
  zoo/eva02_swiglu_synth_io.safetensors
      EVA-02 base/large: the same with qkv_fused=False (q_proj/k_proj/v_proj, k without bias)
      and scale_mlp=True (SwiGLU with fc1_g/fc1_x and mlp.norm): logits, logits_48x32.
  zoo/swinv2_synth_io.safetensors
      timm SwinTransformerV2(img 32, patch 4, window 4, D 32, depths (2, 2), heads (2, 4),
      10 classes): post-norm blocks, cosine attention (logit_scale), q_bias/v_bias, cpb_mlp
      (pretrained_window_size 0), merging with the norm after the reduction: logits, and
      logits_48x32 of the model built for 48x32 (grids 12x8 and 6x4: the second stage shifts and
      pads its 6 rows to 8, and clamps the 4 columns' window without shifting them; timm's
      dynamic_img_size would keep the 32x32 model's unshifted second stage).

  zoo/swinv2_tv_synth_io.safetensors
      torchvision SwinTransformer(patch_size=[4, 4], embed_dim=32, depths=[2, 2],
      num_heads=[2, 4], window_size=[4, 4], num_classes=10, block=SwinTransformerBlockV2,
      downsample_layer=PatchMergingV2) (torchvision's swin_v2_* structure; its qkv.bias keeps a
      key third that its forward zeroes): logits, logits_48x32. state_dict_fnv1a64 covers the
      parameters only (torchvision also stores relative_position_index and
      relative_coords_table, which the loader ignores).

Tooling only (a venv with torch, timm, safetensors, numpy; tests never run Python):

    python3 -m venv /tmp/gold-venv && /tmp/gold-venv/bin/pip install torch torchvision timm safetensors pillow
    /tmp/gold-venv/bin/python tests/golden/make_zoo_goldens.py
"""
import json
import os

import timm
import torch
from timm.models.beit import Beit
from timm.models.beit import checkpoint_filter_fn as beit_checkpoint_filter_fn
from timm.models.deit import VisionTransformerDistilled
from timm.models.eva import Eva
from timm.models.swin_transformer_v2 import SwinTransformerV2
from torchvision.models.swin_transformer import (PatchMergingV2, SwinTransformer,
                                                 SwinTransformerBlockV2)
from timm.models.vision_transformer import VisionTransformer

import make_goldens
from make_goldens import fnv1a64, save, synthetic

HERE = os.path.dirname(os.path.abspath(__file__))
make_goldens.OUT = os.path.join(HERE, "..", "data", "zoo")


def state_dict_hash(state):
    """fnv1a64 of 'name:d0xd1x...' lines (sorted names), mirrored by the C++ tests."""
    text = "".join(f"{k}:{'x'.join(str(d) for d in v.shape)}\n" for k, v in sorted(state.items()))
    return f"{fnv1a64(text):016x}"


def synthesize(model):
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(synthetic(name, list(p.shape)))
    return model.eval()


def metadata(model, cfg):
    return {"golden_source": f"timm {timm.__version__} {type(model).__name__}, synthetic weights",
            "golden_config": json.dumps(cfg, sort_keys=True),
            "state_dict_fnv1a64": state_dict_hash(model.state_dict())}


def save_two_sizes(name, model, cfg, at_48x32=None, meta=None):
    """Saves the logits of synthetic("input", [2, 3, 32, 32]) and of
    synthetic("input_48x32", [1, 3, 48, 32]) (by `at_48x32` if given, else the same model)."""
    out = {"logits": model(synthetic("input", [2, 3, 32, 32])),
           "logits_48x32": (at_48x32 or model)(synthetic("input_48x32", [1, 3, 48, 32]))}
    save(f"{name}_synth_io.safetensors", out, meta or metadata(model, cfg))


@torch.no_grad()
def deit3():
    cfg = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10,
               no_embed_class=True, init_values=1e-6, dynamic_img_size=True)
    model = synthesize(VisionTransformer(**cfg))
    save_two_sizes("deit3", model, cfg)


@torch.no_grad()
def registers():
    base = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10,
                dynamic_img_size=True, reg_tokens=4)
    for name, extra in (("reg_cls", dict()),
                        ("reg_gap", dict(class_token=False, no_embed_class=True,
                                         global_pool="avg", init_values=1e-5))):
        cfg = dict(base, **extra)
        model = synthesize(VisionTransformer(**cfg))
        save_two_sizes(name, model, cfg)


@torch.no_grad()
def deit_distilled():
    cfg = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10,
               dynamic_img_size=True)
    model = synthesize(VisionTransformerDistilled(**cfg))
    save_two_sizes("deit_dist", model, cfg)


@torch.no_grad()
def beit():
    models = {}
    for name, size, shape in (("beit", 32, [2, 3, 32, 32]),
                              ("beit_48x32", (48, 32), [1, 3, 48, 32])):
        cfg = dict(img_size=size, patch_size=8, embed_dim=64, depth=2, num_heads=4,
                   num_classes=10, use_abs_pos_emb=False, use_rel_pos_bias=True, init_values=0.1)
        model = synthesize(Beit(**cfg))
        models[name] = (model, cfg)
        x = synthetic("input" if size == 32 else "input_48x32", shape)
        out = {"logits": model(x)}
        if name == "beit":
            # The 32x32 weights used at 48x32 as timm loads a checkpoint at another size:
            # checkpoint_filter_fn resizes each relative table with resize_rel_pos_bias_table.
            at = Beit(**dict(cfg, img_size=(48, 32))).eval()
            sd = beit_checkpoint_filter_fn(model.state_dict(), at)
            at.load_state_dict(sd, strict=False)
            out["logits_48x32_resized"] = at(synthetic("input_48x32", [1, 3, 48, 32]))
        save(f"{name}_synth_io.safetensors", out, metadata(model, cfg))


@torch.no_grad()
def eva():
    base = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10,
                init_values=1e-5, use_rot_pos_emb=True, dynamic_img_size=True)
    variants = (
        ("eva_rope", dict(attn_type="rope", global_pool="token", use_abs_pos_emb=False,
                          rope_grid_indexing="xy", rope_temperature=100.0)),
        ("eva_rope_mixed_ape", dict(attn_type="rope", global_pool="token", use_abs_pos_emb=True,
                                    no_embed_class=True,
                                    rope_type="mixed", rope_grid_indexing="xy",
                                    rope_temperature=10.0)),
        ("eva_reg_gap", dict(class_token=False, num_reg_tokens=1, global_pool="avg",
                             use_abs_pos_emb=False, ref_feat_shape=(4, 4))),
    )
    for name, extra in variants:
        cfg = dict(base, **extra)
        model = synthesize(Eva(**cfg))
        save_two_sizes(name, model, cfg)


@torch.no_grad()
def eva02():
    base = dict(img_size=32, patch_size=8, embed_dim=64, depth=2, num_heads=4, num_classes=10,
                mlp_ratio=4 * 2 / 3, swiglu_mlp=True, use_rot_pos_emb=True, ref_feat_shape=(4, 4),
                dynamic_img_size=True)
    for name, extra in (("eva02_glu", dict()),
                        ("eva02_swiglu", dict(qkv_fused=False, scale_mlp=True))):
        cfg = dict(base, **extra)
        model = synthesize(Eva(**cfg))
        save_two_sizes(name, model, cfg)


@torch.no_grad()
def swinv2():
    cfg = dict(img_size=32, patch_size=4, window_size=4, embed_dim=32, depths=(2, 2),
               num_heads=(2, 4), num_classes=10)
    model = synthesize(SwinTransformerV2(**cfg))
    # Built for 48x32 (no parameter depends on the size): timm's dynamic_img_size would keep the
    # windows and shifts chosen for 32x32, set_input_size recomputes them as vitpe does.
    at_48x32 = synthesize(SwinTransformerV2(**dict(cfg, img_size=(48, 32))))
    save_two_sizes("swinv2", model, cfg, at_48x32=at_48x32)


@torch.no_grad()
def swinv2_torchvision():
    cfg = dict(patch_size=[4, 4], embed_dim=32, depths=[2, 2], num_heads=[2, 4],
               window_size=[4, 4], num_classes=10)
    model = synthesize(SwinTransformer(**cfg, block=SwinTransformerBlockV2,
                                       downsample_layer=PatchMergingV2))
    meta = metadata(model, dict(cfg, block="SwinTransformerBlockV2",
                                downsample_layer="PatchMergingV2"))
    meta["golden_source"] = "torchvision SwinTransformer V2, synthetic weights"
    meta["state_dict_fnv1a64"] = state_dict_hash(dict(model.named_parameters()))
    save_two_sizes("swinv2_tv", model, cfg, meta=meta)


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(1)
    os.makedirs(make_goldens.OUT, exist_ok=True)
    deit3()
    registers()
    deit_distilled()
    beit()
    eva()
    eva02()
    swinv2()
    swinv2_torchvision()
