// vitpe: Vision Transformers with interchangeable 2D positional encodings.
// The one header an application includes: tensors and ops, encodings, models (ViT, Swin),
// checkpoints, preprocessing, the one-call Classifier and the installed data files. Every
// installed header includes the others as "vitpe/...": only the installed include folder goes on
// an application's include path.
#pragma once

#include "vitpe/encodings/encoding.h"
#include "vitpe/ops/ops.h"
#include "vitpe/ops/tensor.h"
#include "vitpe/vit/io/checkpoint.h"
#include "vitpe/vit/io/classifier.h"
#include "vitpe/vit/io/data_files.h"
#include "vitpe/vit/io/preprocess.h"
#include "vitpe/vit/models/model.h"
#include "vitpe/vit/models/streams.h"
#include "vitpe/vitpe_version.h"
