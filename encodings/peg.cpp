// `peg`: CPVT's positional encoding generator (Chu et al., "Conditional Positional Encodings for
// Vision Transformers"): a depthwise 3x3 convolution (stride 1, zero padding 1, bias, groups =
// D) over the patch tokens laid out as their grid, added to them: x = x + DWConv3x3(x)
// (dwconv3x3_forward, ops/ops.h). The class and other prefix tokens pass unchanged.
//
// Site: conditional (encoding.h), after block `after` (default 1: after the first block, CPVT's
// best placement; 0: on the patch embeddings before the first block). It is computed from the
// tokens at any grid, so it needs no extension rule: the zero padding marks the border, which is
// how it carries absolute position.
// Parameters: "pos_block.proj.weight" [D, 1, 3, 3] (PyTorch's Conv2d weight shape) and
// "pos_block.proj.bias" [D]; CPVT's own files name them pos_block.proj.0.* (or pos_block.0.proj.0.*
// in its pyramid models). Initialised as PyTorch's Conv2d default: uniform within
// +-1/sqrt(fan_in), fan_in = 9, for both. The weight decays (a conv kernel, as the patch
// embedding's), the bias does not.
#include <stdexcept>
#include <string>

#include "encodings/kinds.h"
#include "ops/ops.h"

namespace vitpe::enc {

namespace {

class Peg final : public ConditionalEncoding {
 public:
  Peg(int64_t dim, Grid grid, int64_t prefix, int64_t after, Rng& rng)
      : dim_(dim), prefix_(prefix), after_(after) {
    require(dim >= 1, "peg", "dim must be >= 1, got " + std::to_string(dim));
    require(prefix >= 0, "peg", "prefix must be >= 0, got " + std::to_string(prefix));
    check_grid("peg", grid);
    const double bound = 1.0 / 3.0;  // 1 / sqrt(fan_in = 1 * 3 * 3)
    weight_.name = "pos_block.proj.weight";
    weight_.value = Tensor::empty({dim, 1, 3, 3});
    rng.fill_uniform(weight_.value, -bound, bound);
    weight_.grad = Tensor::zeros(weight_.value.shape());
    bias_.name = "pos_block.proj.bias";
    bias_.value = Tensor::empty({dim});
    rng.fill_uniform(bias_.value, -bound, bound);
    bias_.grad = Tensor::zeros(bias_.value.shape());
    bias_.no_decay = true;
  }

  std::string kind() const override { return "peg"; }
  int64_t after_block() const override { return after_; }

  void forward(Tensor& tokens, Grid grid) override {
    check_tokens("forward", tokens, grid);
    if (!input_.defined() || input_.shape() != tokens.shape())
      input_ = Tensor::empty(tokens.shape());
    input_.copy_from(tokens);
    grid_ = grid;
    dwconv3x3_forward(tokens, input_, kernel(weight_.value), bias_.value, grid.rows, grid.cols,
                      prefix_);
  }

  void backward(Tensor& dtokens, Grid grid) override {
    check_tokens("backward", dtokens, grid);
    if (!input_.defined() || input_.shape() != dtokens.shape() || grid != grid_)
      throw std::logic_error("peg backward: no forward of tokens " + dtokens.shape().str() +
                             " on grid " + grid.str() + " to go back through");
    if (!dout_.defined() || dout_.shape() != dtokens.shape())
      dout_ = Tensor::empty(dtokens.shape());
    dout_.copy_from(dtokens);
    dtokens.zero();
    Tensor dw = kernel(weight_.grad);
    dwconv3x3_backward(dtokens, dw, bias_.grad, dout_, input_, kernel(weight_.value), grid.rows,
                       grid.cols, prefix_);
  }

  std::vector<Param*> params() override { return {&weight_, &bias_}; }

 private:
  // [D, 1, 3, 3] as the op's [D, 3, 3] (a view).
  Tensor kernel(const Tensor& t) const { return t.reshape({dim_, 3, 3}); }

  void check_tokens(const char* op, const Tensor& t, Grid grid) const {
    check_cpu_f32(op, "tokens", t);
    if (t.ndim() != 3 || t.size(1) != prefix_ + grid.count() || t.size(2) != dim_)
      throw ShapeError(std::string("peg ") + op + ": expected tokens [B, " +
                       std::to_string(prefix_ + grid.count()) + ", " + std::to_string(dim_) +
                       "] for grid " + grid.str() + " with " + std::to_string(prefix_) +
                       " prefix tokens, found " + t.shape().str());
  }

  int64_t dim_, prefix_, after_;
  Param weight_, bias_;
  Grid grid_;
  Tensor input_, dout_;  // the input of the last forward; backward's copy of the gradient
};

}  // namespace

KindDef peg_kind() {
  KindDef k;
  k.name = "peg";
  k.site = Site::conditional;
  k.options = {{"after",
                "1",
                "the block after which it applies (0: on the patch embeddings before the first)",
                {},
                false,
                true}};
  k.summary =
      "CPVT's positional encoding generator: a depthwise 3x3 convolution over the token "
      "grid after the first block";
  k.extension = ExtensionRule::none;
  k.extension_note = "computed from the tokens at any grid; zero padding marks the border";
  // Windowed models (Swin) do not take it: no conditional site there.
  k.studied_windowed = false;
  k.make_conditional = [](const Options& o, int64_t dim, Grid grid, int64_t prefix, Rng& rng) {
    return std::make_unique<Peg>(dim, grid, prefix, static_cast<int64_t>(o.number("after")), rng);
  };
  return k;
}

}  // namespace vitpe::enc
