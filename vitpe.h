// vitpe: Vision Transformers with interchangeable 2D positional encodings.
// The one header an application includes: tensors and ops, encodings, models (ViT, Swin),
// checkpoints, preprocessing and the one-call Classifier.
#pragma once

#include "encodings/encoding.h"
#include "ops/ops.h"
#include "ops/tensor.h"
#include "vit/io/checkpoint.h"
#include "vit/io/classifier.h"
#include "vit/io/preprocess.h"
#include "vit/models/model.h"
#include "vitpe_version.h"
