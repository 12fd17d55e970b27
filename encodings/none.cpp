// `none`: no position signal at either site (the "no position" baseline of the ViT and Swin
// papers). Both makers return nullptr for it, so models add nothing and rotate nothing.
// Prefix tokens: nothing to give. Checkpoint names: none (no parameters).
#include "encodings/kinds.h"

namespace vitpe::enc {

KindDef none_kind() {
  KindDef k;
  k.name = "none";
  k.site = Site::none;
  k.summary = "no positional information (baseline); cannot be combined with other kinds";
  return k;
}

}  // namespace vitpe::enc
