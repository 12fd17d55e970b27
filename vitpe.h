// vitpe: Vision Transformers with interchangeable 2D positional encodings.
// The one header an application includes: tensors and ops, encodings, models (ViT, Swin),
// checkpoints and preprocessing.
#pragma once

#include "encodings/encoding.h"
#include "ops/ops.h"
#include "ops/tensor.h"
#include "vit/io/checkpoint.h"
#include "vit/models/model.h"
#include "vit/io/preprocess.h"
#include "vitpe_version.h"
