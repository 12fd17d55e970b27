#!/usr/bin/env python3
"""Writes vit/models/imagenet_labels.cpp: the 1000 ImageNet-1k class names in the standard order
(sorted WordNet synset ids, as timm and torchvision index them), short forms as torchvision's
weights list them (`ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"]`). Tooling only; the
output is committed:

    /tmp/gold-venv/bin/python scripts/make_imagenet_labels.py
"""
import json
import os

from torchvision.models import ViT_B_16_Weights

names = ViT_B_16_Weights.IMAGENET1K_V1.meta["categories"]
assert len(names) == 1000 and len(set(names)) == 1000
out = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "vit", "models",
                   "imagenet_labels.cpp")
with open(out, "w") as f:
    f.write("// The ImageNet-1k class names (vit/models/model.h: imagenet_labels()), written by\n"
            "// scripts/make_imagenet_labels.py from torchvision's list: do not edit.\n"
            "#include \"vit/io/checkpoint.h\"\n\nnamespace vitpe {\n\n"
            "const std::vector<std::string>& imagenet_labels() {\n"
            "  static const std::vector<std::string> names = {\n")
    for n in names:
        f.write(f"      {json.dumps(n)},\n")
    f.write("  };\n  return names;\n}\n\n}  // namespace vitpe\n")
print("wrote", out)
