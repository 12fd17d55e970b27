// CudaModel in a build without CUDA: constructing one says how to get CUDA.
#include <stdexcept>

#include "vit/models/cuda_model.h"

namespace vitpe {

struct CudaModel::Impl {};

CudaModel::CudaModel(Model& model, DType) {
  throw std::runtime_error("cannot run " + model.config().name +
                           " on the cuda device: this vitpe was built without CUDA (configure "
                           "with -DVITPE_CUDA=ON and the CUDA Toolkit)");
}

CudaModel::~CudaModel() = default;

const Tensor& CudaModel::forward(const Tensor&) {
  throw std::logic_error("CudaModel::forward without CUDA");
}

const ModelConfig& CudaModel::config() const {
  throw std::logic_error("CudaModel::config without CUDA");
}

DType CudaModel::dtype() const { return DType::f32; }

}  // namespace vitpe
