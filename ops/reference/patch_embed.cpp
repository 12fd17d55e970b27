// Reference patch embedding: a direct convolution with kernel = stride = patch, in double.
#include <stdexcept>
#include <string>

#include "ops/reference.h"

namespace vitpe::ref {

// x: [B, C, H, W], w: [D, C, p, p], b: [D] or undefined -> [B, (H/p)*(W/p), D]
Tensor patch_embed(const Tensor& x, const Tensor& w, const Tensor& b, int64_t patch) {
  const int64_t bs = x.size(0), c = x.size(1), h = x.size(2), wd = x.size(3), d = w.size(0);
  const int64_t p = patch;
  if (h % p || wd % p) {
    throw ShapeError("ref::patch_embed: image " + std::to_string(h) + "x" + std::to_string(wd) +
                     " is not a multiple of the patch " + std::to_string(p));
  }
  const int64_t gh = h / p, gw = wd / p;
  Tensor y = Tensor::empty(Shape{bs, gh * gw, d});
  const float* xp = x.f32();
  const float* wp = w.f32();
  const float* bp = b.defined() ? b.f32() : nullptr;
  float* yp = y.f32();
  for (int64_t bi = 0; bi < bs; ++bi)
    for (int64_t gy = 0; gy < gh; ++gy)
      for (int64_t gx = 0; gx < gw; ++gx)
        for (int64_t o = 0; o < d; ++o) {
          double s = bp ? bp[o] : 0.0;
          for (int64_t ci = 0; ci < c; ++ci)
            for (int64_t i = 0; i < p; ++i)
              for (int64_t j = 0; j < p; ++j) {
                const double xv = xp[((bi * c + ci) * h + gy * p + i) * wd + gx * p + j];
                s += xv * wp[((o * c + ci) * p + i) * p + j];
              }
          yp[(bi * gh * gw + gy * gw + gx) * d + o] = static_cast<float>(s);
        }
  return y;
}

}  // namespace vitpe::ref
