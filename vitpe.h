// vitpe: Vision Transformers with interchangeable 2D positional encodings.
// The one header an application includes.
#pragma once

#include "ops/ops.h"
#include "ops/tensor.h"
