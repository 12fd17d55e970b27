// Separable resampling with PyTorch's weights (see resample.h for the two families of kernels)
// and with BEiT's geometric offsets (timm's resize_rel_pos_bias_table).
#include "ops/resample.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace vitpe {

namespace {

// Keys' cubic convolution kernel, |x| < 1 and 1 <= |x| < 2 branches (PyTorch's names).
double cubic1(double x, double a) { return ((a + 2) * x - (a + 3)) * x * x + 1; }
double cubic2(double x, double a) { return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a; }

double aa_filter(Filter f, double x) {
  x = std::fabs(x);
  if (f == Filter::bilinear) return x < 1.0 ? 1.0 - x : 0.0;
  constexpr double a = -0.5;
  if (x < 1.0) return cubic1(x, a);
  if (x < 2.0) return cubic2(x, a);
  return 0.0;
}

void check_sizes(const char* op, int64_t in, int64_t out) {
  if (in < 1 || out < 1)
    throw std::invalid_argument(std::string(op) + ": sizes must be >= 1, got " +
                                std::to_string(in) + " -> " + std::to_string(out));
}

}  // namespace

ResampleTaps resample_taps(int64_t in_size, int64_t out_size, Filter filter, bool antialias) {
  check_sizes("resample_taps", in_size, out_size);
  ResampleTaps t;
  t.in_size = in_size;
  t.out_size = out_size;
  t.start.resize(out_size);
  t.count.resize(out_size);
  const double scale = static_cast<double>(in_size) / static_cast<double>(out_size);

  if (antialias) {
    const double interp = filter == Filter::bicubic ? 4.0 : 2.0;
    const double support = scale >= 1.0 ? interp * 0.5 * scale : interp * 0.5;
    const double invscale = scale >= 1.0 ? 1.0 / scale : 1.0;
    t.max_taps = static_cast<int64_t>(std::ceil(support)) * 2 + 1;
    t.weight.assign(out_size * t.max_taps, 0.f);
    std::vector<double> w(t.max_taps);
    for (int64_t i = 0; i < out_size; ++i) {
      const double center = scale * (i + 0.5);
      // Truncation toward zero, as PyTorch's static_cast<int64_t>.
      int64_t xmin = std::max<int64_t>(static_cast<int64_t>(center - support + 0.5), 0);
      int64_t xsize =
          std::min<int64_t>(static_cast<int64_t>(center + support + 0.5), in_size) - xmin;
      xsize = std::clamp<int64_t>(xsize, 0, t.max_taps);
      double total = 0;
      for (int64_t j = 0; j < xsize; ++j) {
        w[j] = aa_filter(filter, (j + xmin - center + 0.5) * invscale);
        total += w[j];
      }
      for (int64_t j = 0; j < xsize; ++j)
        t.weight[i * t.max_taps + j] = static_cast<float>(total != 0.0 ? w[j] / total : w[j]);
      t.start[i] = xmin;
      t.count[i] = xsize;
    }
    return t;
  }

  if (filter == Filter::bilinear) {
    t.max_taps = 2;
    t.weight.assign(out_size * 2, 0.f);
    for (int64_t i = 0; i < out_size; ++i) {
      double src = std::max(scale * (i + 0.5) - 0.5, 0.0);
      int64_t x0 = static_cast<int64_t>(src);
      if (x0 > in_size - 1) x0 = in_size - 1;
      double l1 = src - x0;
      t.start[i] = x0;
      if (x0 < in_size - 1) {
        t.count[i] = 2;
        t.weight[i * 2] = static_cast<float>(1.0 - l1);
        t.weight[i * 2 + 1] = static_cast<float>(l1);
      } else {
        t.count[i] = 1;  // both taps land on the last sample
        t.weight[i * 2] = 1.f;
      }
    }
    return t;
  }

  // Classic bicubic (a = -0.75): four taps floor(x)-1 .. floor(x)+2, indices clamped to the
  // border; clamped taps are merged into the border sample so the run stays contiguous.
  constexpr double a = -0.75;
  t.max_taps = 4;
  t.weight.assign(out_size * 4, 0.f);
  for (int64_t i = 0; i < out_size; ++i) {
    double src = scale * (i + 0.5) - 0.5;  // not clamped for cubic
    int64_t x0 = static_cast<int64_t>(std::floor(src));
    double f = src - x0;
    double c[4] = {cubic2(f + 1.0, a), cubic1(f, a), cubic1(1.0 - f, a), cubic2(2.0 - f, a)};
    int64_t lo = std::clamp<int64_t>(x0 - 1, 0, in_size - 1);
    int64_t hi = std::clamp<int64_t>(x0 + 2, 0, in_size - 1);
    double w[4] = {0, 0, 0, 0};
    for (int k = 0; k < 4; ++k) {
      int64_t idx = std::clamp<int64_t>(x0 - 1 + k, 0, in_size - 1);
      w[idx - lo] += c[k];
    }
    t.start[i] = lo;
    t.count[i] = hi - lo + 1;
    for (int64_t k = 0; k < t.count[i]; ++k) t.weight[i * 4 + k] = static_cast<float>(w[k]);
  }
  return t;
}

namespace {

// y = (H taps) x (W taps) applied to each of c planes [th.in_size, tw.in_size]; y overwritten.
// The W axis first, then the H axis (PyTorch's order).
void apply_taps(const float* x, int64_t c, const ResampleTaps& th, const ResampleTaps& tw,
                float* y) {
  const int64_t h = th.in_size, w = tw.in_size, out_h = th.out_size, out_w = tw.out_size;
  std::vector<float> tmp(static_cast<size_t>(h * out_w));  // one plane after the W pass
  for (int64_t p = 0; p < c; ++p) {
    const float* xp = x + p * h * w;
    float* yp = y + p * out_h * out_w;
    // W pass: [h, w] -> [h, out_w]
    for (int64_t r = 0; r < h; ++r)
      for (int64_t i = 0; i < out_w; ++i) {
        const float* wt = &tw.weight[i * tw.max_taps];
        const float* src = xp + r * w + tw.start[i];
        float acc = 0.f;
        for (int64_t k = 0; k < tw.count[i]; ++k) acc += wt[k] * src[k];
        tmp[r * out_w + i] = acc;
      }
    // H pass: [h, out_w] -> [out_h, out_w]
    for (int64_t i = 0; i < out_h; ++i) {
      const float* wt = &th.weight[i * th.max_taps];
      float* dst = yp + i * out_w;
      std::fill(dst, dst + out_w, 0.f);
      for (int64_t k = 0; k < th.count[i]; ++k) {
        const float* src = &tmp[(th.start[i] + k) * out_w];
        for (int64_t j = 0; j < out_w; ++j) dst[j] += wt[k] * src[j];
      }
    }
  }
}

// The transpose of apply_taps: dy [c, th.out_size, tw.out_size] -> dx [c, th.in_size,
// tw.in_size], overwritten.
void apply_taps_backward(const float* dy, int64_t c, const ResampleTaps& th, const ResampleTaps& tw,
                         float* dx) {
  const int64_t h = th.in_size, w = tw.in_size, out_h = th.out_size, out_w = tw.out_size;
  std::vector<float> tmp(static_cast<size_t>(h * out_w));
  for (int64_t p = 0; p < c; ++p) {
    const float* dyp = dy + p * out_h * out_w;
    float* dxp = dx + p * h * w;
    // adjoint of the H pass: [out_h, out_w] -> [h, out_w]
    std::fill(tmp.begin(), tmp.end(), 0.f);
    for (int64_t i = 0; i < out_h; ++i) {
      const float* wt = &th.weight[i * th.max_taps];
      for (int64_t k = 0; k < th.count[i]; ++k) {
        float* dst = &tmp[(th.start[i] + k) * out_w];
        for (int64_t j = 0; j < out_w; ++j) dst[j] += wt[k] * dyp[i * out_w + j];
      }
    }
    // adjoint of the W pass: [h, out_w] -> [h, w]
    std::fill(dxp, dxp + h * w, 0.f);
    for (int64_t r = 0; r < h; ++r)
      for (int64_t i = 0; i < out_w; ++i) {
        const float* wt = &tw.weight[i * tw.max_taps];
        float g = tmp[r * out_w + i];
        float* dst = dxp + r * w + tw.start[i];
        for (int64_t k = 0; k < tw.count[i]; ++k) dst[k] += wt[k] * g;
      }
  }
}

}  // namespace

void resample_planes(const float* x, int64_t c, int64_t h, int64_t w, float* y, int64_t out_h,
                     int64_t out_w, Filter filter, bool antialias) {
  check_sizes("resample", h, out_h);
  check_sizes("resample", w, out_w);
  if (h == out_h && w == out_w) {
    std::copy(x, x + c * h * w, y);
    return;
  }
  apply_taps(x, c, resample_taps(h, out_h, filter, antialias),
             resample_taps(w, out_w, filter, antialias), y);
}

void resample_planes_backward(const float* dy, int64_t c, int64_t out_h, int64_t out_w, float* dx,
                              int64_t h, int64_t w, Filter filter, bool antialias) {
  check_sizes("resample_backward", h, out_h);
  check_sizes("resample_backward", w, out_w);
  if (h == out_h && w == out_w) {
    std::copy(dy, dy + c * h * w, dx);
    return;
  }
  apply_taps_backward(dy, c, resample_taps(h, out_h, filter, antialias),
                      resample_taps(w, out_w, filter, antialias), dx);
}

// ---- BEiT's geometric resize (timm's resize_rel_pos_bias_table, see resample.h) ----------------

namespace {

void check_odd_sizes(const char* op, int64_t in, int64_t out) {
  if (in < 1 || out < 1 || in % 2 == 0 || out % 2 == 0)
    throw std::invalid_argument(std::string(op) +
                                ": sizes count relative offsets -(M-1)..M-1, so must be odd and "
                                ">= 1, got " +
                                std::to_string(in) + " -> " + std::to_string(out));
}

// unilm's source offsets -d_n..-d_1, 0, d_1..d_n for src samples and m = dst // 2, in double
// (Python floats, the same operations in the same order) and then rounded to float32 as timm's
// torch.tensor(...) does.
std::vector<float> beit_source_offsets(int64_t src, int64_t dst) {
  const int64_t n = src / 2, m = dst / 2;
  double left = 1.01, right = 1.5, q = 0;
  while (right - left > 1e-6) {
    q = (left + right) / 2.0;
    const double gp = (1.0 - std::pow(q, static_cast<double>(n))) / (1.0 - q);
    if (gp > static_cast<double>(m)) {
      right = q;
    } else {
      left = q;
    }
  }
  std::vector<double> dis;
  double cur = 1;
  for (int64_t i = 0; i < n; ++i) {
    dis.push_back(cur);
    cur += std::pow(q, static_cast<double>(i + 1));
  }
  std::vector<float> p(static_cast<size_t>(src));
  for (int64_t k = 0; k < n; ++k) {
    p[n - 1 - k] = static_cast<float>(-dis[k]);
    p[n + 1 + k] = static_cast<float>(dis[k]);
  }
  p[n] = 0.f;
  return p;
}

}  // namespace

ResampleTaps beit_resample_taps(int64_t in_size, int64_t out_size) {
  check_odd_sizes("beit_resample_taps", in_size, out_size);
  const std::vector<float> p = beit_source_offsets(in_size, out_size);
  ResampleTaps t;
  t.in_size = in_size;
  t.out_size = out_size;
  t.max_taps = 2;
  t.start.resize(out_size);
  t.count.resize(out_size);
  t.weight.assign(out_size * 2, 0.f);
  const int64_t m = out_size / 2;
  for (int64_t i = 0; i < out_size; ++i) {
    const double x = static_cast<double>(i - m);  // target offset
    // torch.bucketize(x, p): the first r with p[r] >= x; past the end -> the last sample.
    const int64_t r = std::min<int64_t>(
        std::lower_bound(p.begin(), p.end(), static_cast<float>(x)) - p.begin(), in_size - 1);
    const int64_t l = std::max<int64_t>(r - 1, 0);
    double a = std::max(x - p[l], 0.0);  // distance to the left sample: weight of the right one
    double b = std::max(p[r] - x, 0.0);  // distance to the right sample: weight of the left one
    if (a == 0.0 && b == 0.0) a = b = 1.0;
    t.start[i] = l;
    if (l == r) {
      t.count[i] = 1;
      t.weight[i * 2] = 1.f;
    } else {
      t.count[i] = 2;
      t.weight[i * 2] = static_cast<float>(b / (a + b));
      t.weight[i * 2 + 1] = static_cast<float>(a / (a + b));
    }
  }
  return t;
}

namespace {
// Splits a [C, H, W] or [H, W] tensor's shape into (c, h, w).
void planes_of(const char* op, const Tensor& x, int64_t& c, int64_t& h, int64_t& w) {
  check_cpu_f32(op, "input", x);
  if (x.ndim() == 3) {
    c = x.size(0), h = x.size(1), w = x.size(2);
  } else if (x.ndim() == 2) {
    c = 1, h = x.size(0), w = x.size(1);
  } else {
    throw ShapeError(std::string(op) + ": expected input of shape [C, H, W] or [H, W], found " +
                     x.shape().str());
  }
}
}  // namespace

Tensor resample(const Tensor& x, int64_t out_h, int64_t out_w, Filter filter, bool antialias) {
  int64_t c, h, w;
  planes_of("resample", x, c, h, w);
  Tensor y = x.ndim() == 3 ? Tensor::empty({c, out_h, out_w}) : Tensor::empty({out_h, out_w});
  resample_planes(x.f32(), c, h, w, y.f32(), out_h, out_w, filter, antialias);
  return y;
}

Tensor resample_backward(const Tensor& dy, int64_t in_h, int64_t in_w, Filter filter,
                         bool antialias) {
  int64_t c, oh, ow;
  planes_of("resample_backward", dy, c, oh, ow);
  Tensor dx = dy.ndim() == 3 ? Tensor::empty({c, in_h, in_w}) : Tensor::empty({in_h, in_w});
  resample_planes_backward(dy.f32(), c, oh, ow, dx.f32(), in_h, in_w, filter, antialias);
  return dx;
}

Tensor resample_beit(const Tensor& x, int64_t out_h, int64_t out_w) {
  int64_t c, h, w;
  planes_of("resample_beit", x, c, h, w);
  check_odd_sizes("resample_beit", h, out_h);
  check_odd_sizes("resample_beit", w, out_w);
  Tensor y = x.ndim() == 3 ? Tensor::empty({c, out_h, out_w}) : Tensor::empty({out_h, out_w});
  if (h == out_h && w == out_w) {
    y.copy_from(x);
  } else {
    apply_taps(x.f32(), c, beit_resample_taps(h, out_h), beit_resample_taps(w, out_w), y.f32());
  }
  return y;
}

Tensor resample_beit_backward(const Tensor& dy, int64_t in_h, int64_t in_w) {
  int64_t c, oh, ow;
  planes_of("resample_beit_backward", dy, c, oh, ow);
  check_odd_sizes("resample_beit_backward", in_h, oh);
  check_odd_sizes("resample_beit_backward", in_w, ow);
  Tensor dx = dy.ndim() == 3 ? Tensor::empty({c, in_h, in_w}) : Tensor::empty({in_h, in_w});
  if (in_h == oh && in_w == ow) {
    dx.copy_from(dy);
  } else {
    apply_taps_backward(dy.f32(), c, beit_resample_taps(in_h, oh), beit_resample_taps(in_w, ow),
                        dx.f32());
  }
  return dx;
}

ResampleTaps hold_edges_taps(int64_t in_size, int64_t out_size, int64_t offset) {
  if (in_size < 1 || out_size < 1) {
    throw std::invalid_argument("hold_edges_taps: sizes must be >= 1, got " +
                                std::to_string(in_size) + " -> " + std::to_string(out_size));
  }
  ResampleTaps t;
  t.in_size = in_size;
  t.out_size = out_size;
  t.max_taps = 1;
  t.start.resize(out_size);
  t.count.assign(out_size, 1);
  t.weight.assign(out_size, 1.f);
  for (int64_t i = 0; i < out_size; ++i)
    t.start[i] = std::clamp(i - offset, int64_t{0}, in_size - 1);
  return t;
}

namespace {
int64_t hold_offset(int64_t in, int64_t out, bool centred) { return centred ? (out - in) / 2 : 0; }
}  // namespace

Tensor resample_hold_edges(const Tensor& x, int64_t out_h, int64_t out_w, bool centred) {
  int64_t c, h, w;
  planes_of("resample_hold_edges", x, c, h, w);
  Tensor y = x.ndim() == 3 ? Tensor::empty({c, out_h, out_w}) : Tensor::empty({out_h, out_w});
  apply_taps(x.f32(), c, hold_edges_taps(h, out_h, hold_offset(h, out_h, centred)),
             hold_edges_taps(w, out_w, hold_offset(w, out_w, centred)), y.f32());
  return y;
}

Tensor resample_hold_edges_backward(const Tensor& dy, int64_t in_h, int64_t in_w, bool centred) {
  int64_t c, oh, ow;
  planes_of("resample_hold_edges_backward", dy, c, oh, ow);
  Tensor dx = dy.ndim() == 3 ? Tensor::empty({c, in_h, in_w}) : Tensor::empty({in_h, in_w});
  apply_taps_backward(dy.f32(), c, hold_edges_taps(in_h, oh, hold_offset(in_h, oh, centred)),
                      hold_edges_taps(in_w, ow, hold_offset(in_w, ow, centred)), dx.f32());
  return dx;
}

namespace {

// a: [n, n] symmetric positive definite (row-major, double) -> its Cholesky factor L in place
// (lower triangle); throws when it is not positive definite.
void cholesky_in_place(std::vector<double>& a, int64_t n) {
  for (int64_t j = 0; j < n; ++j) {
    double d = a[j * n + j];
    for (int64_t k = 0; k < j; ++k) d -= a[j * n + k] * a[j * n + k];
    if (!(d > 0)) throw std::runtime_error("pi_resize_kernel: the resize matrix is singular");
    const double l = std::sqrt(d);
    a[j * n + j] = l;
    for (int64_t i = j + 1; i < n; ++i) {
      double v = a[i * n + j];
      for (int64_t k = 0; k < j; ++k) v -= a[i * n + k] * a[j * n + k];
      a[i * n + j] = v / l;
    }
  }
}

// Solves L L^T x = b in place.
void cholesky_solve(const std::vector<double>& l, int64_t n, double* b) {
  for (int64_t i = 0; i < n; ++i) {
    double v = b[i];
    for (int64_t k = 0; k < i; ++k) v -= l[i * n + k] * b[k];
    b[i] = v / l[i * n + i];
  }
  for (int64_t i = n - 1; i >= 0; --i) {
    double v = b[i];
    for (int64_t k = i + 1; k < n; ++k) v -= l[k * n + i] * b[k];
    b[i] = v / l[i * n + i];
  }
}

}  // namespace

Tensor pi_resize_kernel(const Tensor& w, int64_t out_h, int64_t out_w) {
  check_cpu_f32("pi_resize_kernel", "w", w);
  if (w.ndim() < 2 || out_h < 1 || out_w < 1) {
    throw ShapeError("pi_resize_kernel: expected kernels [..., h, w] and sizes >= 1, found " +
                     w.shape().str() + " -> " + std::to_string(out_h) + "x" +
                     std::to_string(out_w));
  }
  const int64_t h = w.size(w.ndim() - 2), wd = w.size(w.ndim() - 1);
  const int64_t n = h * wd, m = out_h * out_w, kernels = w.numel() / n;
  Shape out_shape = w.shape();
  out_shape[out_shape.size() - 2] = out_h;
  out_shape[out_shape.size() - 1] = out_w;
  Tensor out = Tensor::empty(out_shape);
  if (h == out_h && wd == out_w) {
    out.copy_from(w);
    return out;
  }
  // B [m, n]: column j is the resize of the patch with a 1 at pixel j.
  Tensor basis = Tensor::zeros({n, h, wd});
  for (int64_t j = 0; j < n; ++j) basis.f32()[j * n + j] = 1.0f;
  const Tensor cols = resample(basis, out_h, out_w, Filter::bilinear, /*antialias=*/false);
  std::vector<double> b(static_cast<size_t>(m * n));
  for (int64_t j = 0; j < n; ++j)
    for (int64_t i = 0; i < m; ++i) b[i * n + j] = cols.f32()[j * m + i];
  // A = pinv(B^T) [m, n]: B (B^T B)^-1 when growing (m >= n), (B B^T)^-1 B when shrinking.
  const bool grow = m >= n;
  const int64_t k = grow ? n : m;
  std::vector<double> gram(static_cast<size_t>(k * k), 0.0);
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = 0; c <= r; ++c) {
      double v = 0;
      if (grow) {
        for (int64_t i = 0; i < m; ++i) v += b[i * n + r] * b[i * n + c];
      } else {
        for (int64_t j = 0; j < n; ++j) v += b[r * n + j] * b[c * n + j];
      }
      gram[r * k + c] = gram[c * k + r] = v;
    }
  cholesky_in_place(gram, k);
  std::vector<double> a(static_cast<size_t>(m * n));
  if (grow) {
    // Row i of A = (Gram^-1 B^T e_i)^T: solve with row i of B.
    std::vector<double> row(static_cast<size_t>(n));
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) row[j] = b[i * n + j];
      cholesky_solve(gram, n, row.data());
      for (int64_t j = 0; j < n; ++j) a[i * n + j] = row[j];
    }
  } else {
    // Column j of A = Gram^-1 (column j of B).
    std::vector<double> col(static_cast<size_t>(m));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t i = 0; i < m; ++i) col[i] = b[i * n + j];
      cholesky_solve(gram, m, col.data());
      for (int64_t i = 0; i < m; ++i) a[i * n + j] = col[i];
    }
  }
  const float* src = w.f32();
  float* dst = out.f32();
  for (int64_t q = 0; q < kernels; ++q)
    for (int64_t i = 0; i < m; ++i) {
      double v = 0;
      for (int64_t j = 0; j < n; ++j) v += a[i * n + j] * static_cast<double>(src[q * n + j]);
      dst[q * m + i] = static_cast<float>(v);
    }
  return out;
}

}  // namespace vitpe
