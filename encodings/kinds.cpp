// Shared building blocks of the encoding kinds (see kinds.h).
#include "encodings/kinds.h"

#include <cmath>
#include <cstring>
#include <stdexcept>

namespace vitpe {

void AttentionEncoding::resample(Grid new_window) { enc::check_grid(kind(), new_window); }

void AttentionEncoding::rotate_qkv_rows(Tensor& qkv, int64_t heads, const AttnGeometry& geom) {
  if (qkv.ndim() != 3 || heads < 1 || qkv.size(2) % (3 * heads) != 0 ||
      qkv.size(1) != geom.tokens()) {
    throw ShapeError("rotate_qkv_rows: expected qkv rows [B, " + std::to_string(geom.tokens()) +
                     ", 3 * heads * head_dim] for " + std::to_string(heads) + " heads, found " +
                     qkv.shape().str());
  }
  const int64_t B = qkv.size(0), N = qkv.size(1), D = qkv.size(2) / 3, hd = D / heads;
  Tensor q = Tensor::empty({B, heads, N, hd}), k = Tensor::empty({B, heads, N, hd});
  Tensor qr = Tensor::empty(q.shape()), kr = Tensor::empty(k.shape());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < heads; ++h) {
        const float* row = qkv.f32() + (b * N + n) * 3 * D + h * hd;
        std::memcpy(q.f32() + ((b * heads + h) * N + n) * hd, row, sizeof(float) * hd);
        std::memcpy(k.f32() + ((b * heads + h) * N + n) * hd, row + D, sizeof(float) * hd);
      }
  rotate(qr, kr, q, k, geom);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < N; ++n)
      for (int64_t h = 0; h < heads; ++h) {
        float* row = qkv.f32() + (b * N + n) * 3 * D + h * hd;
        std::memcpy(row, qr.f32() + ((b * heads + h) * N + n) * hd, sizeof(float) * hd);
        std::memcpy(row + D, kr.f32() + ((b * heads + h) * N + n) * hd, sizeof(float) * hd);
      }
}

AttentionTerms AttentionEncoding::terms(const AttnGeometry& geom) {
  AttentionTerms t;
  t.prefix = geom.prefix;
  t.window_rows = geom.window.rows;
  t.window_cols = geom.window.cols;
  return t;
}

}  // namespace vitpe

namespace vitpe::enc {

const std::string& Options::str(const std::string& name) const {
  auto it = values_.find(name);
  if (it == values_.end())
    throw std::logic_error(kind_ + ": option '" + name + "' is not declared by the kind");
  return it->second;
}

double Options::number(const std::string& name) const { return std::stod(str(name)); }

std::optional<double> Options::number_or_none(const std::string& name) const {
  if (str(name) == "none") return std::nullopt;
  return number(name);
}

Grid Options::grid(const std::string& name) const {
  const std::optional<Grid> g = parse_grid_value(str(name));
  require(g.has_value(), kind_, "option " + name + "=" + str(name) + " is not a grid");
  return *g;
}

std::optional<Grid> parse_grid_value(const std::string& value) {
  if (value == "none") return Grid{0, 0};
  auto side = [](const std::string& s) -> int64_t {
    if (s.empty() || s.size() > 4) return 0;
    for (char ch : s)
      if (ch < '0' || ch > '9') return 0;
    const int64_t v = std::stoll(s);
    return v >= 1 && v <= 4096 ? v : 0;
  };
  const size_t x = value.find('x');
  const int64_t r = side(value.substr(0, x));
  const int64_t c = x == std::string::npos ? r : side(value.substr(x + 1));
  if (r == 0 || c == 0) return std::nullopt;
  return Grid{r, c};
}

void require(bool cond, const std::string& kind, const std::string& what) {
  if (!cond) throw std::invalid_argument(kind + ": " + what);
}

void check_grid(const std::string& kind, Grid grid) {
  require(grid.rows >= 1 && grid.cols >= 1, kind, "grid must be at least 1x1, got " + grid.str());
}

// ---- TableTokenEncoding ---------------------------------------------------------------------

TableTokenEncoding::TableTokenEncoding(std::string kind, int64_t dim, Grid grid, int64_t prefix)
    : kind_(std::move(kind)), dim_(dim), prefix_(prefix), grid_(grid) {
  require(dim >= 1, kind_, "dim must be >= 1, got " + std::to_string(dim));
  require(prefix >= 0, kind_, "prefix must be >= 0, got " + std::to_string(prefix));
  check_grid(kind_, grid);
}

void TableTokenEncoding::resample(Grid new_grid) {
  check_grid(kind_, new_grid);
  grid_ = new_grid;
}

void TableTokenEncoding::check_tokens(const char* op, const Tensor& t, Grid grid) const {
  check_cpu_f32(op, "tokens", t);
  if (t.ndim() != 3 || t.size(1) != prefix_ + grid.count() || t.size(2) != dim_)
    throw ShapeError(kind_ + " " + op + ": expected tokens [B, " +
                     std::to_string(prefix_ + grid.count()) + ", " + std::to_string(dim_) +
                     "] for grid " + grid.str() + " with " + std::to_string(prefix_) +
                     " prefix tokens, found " + t.shape().str());
}

void TableTokenEncoding::forward(Tensor& tokens, Grid grid) {
  check_tokens("forward", tokens, grid);
  const Tensor& tab = table_ref(grid);
  const int64_t n = tab.numel();
  const float* pe = tab.f32();
  float* x = tokens.f32();
#pragma omp parallel for
  for (int64_t b = 0; b < tokens.size(0); ++b) {
    float* xb = x + b * n;
    for (int64_t i = 0; i < n; ++i) xb[i] += pe[i];
  }
}

void TableTokenEncoding::backward(const Tensor& dtokens, Grid grid) {
  check_tokens("backward", dtokens, grid);
  const int64_t n = (prefix_ + grid.count()) * dim_;
  const Shape shape{prefix_ + grid.count(), dim_};
  if (!dtable_.defined() || dtable_.shape() != shape) dtable_ = Tensor::empty(shape);
  float* g = dtable_.f32();
  std::fill(g, g + n, 0.f);
  const float* d = dtokens.f32();
  for (int64_t b = 0; b < dtokens.size(0); ++b)
    for (int64_t i = 0; i < n; ++i) g[i] += d[b * n + i];
  table_backward(dtable_, grid);
}

// ---- DerivedCache ---------------------------------------------------------------------------

const Tensor& DerivedCache::get(Grid grid, const std::vector<const Tensor*>& sources,
                                const std::function<Tensor()>& compute) {
  auto same = [&](const Entry& e) {
    if (e.snapshot.size() != sources.size()) return false;  // never: one owner per cache
    for (size_t i = 0; i < sources.size(); ++i)
      if (e.snapshot[i].numel() != sources[i]->numel() ||
          std::memcmp(e.snapshot[i].f32(), sources[i]->f32(), sources[i]->nbytes()) != 0)
        return false;
    return true;
  };
  for (auto& e : entries_) {
    if (e.grid != grid) continue;
    if (!same(e)) {
      e.value = compute();
      for (size_t i = 0; i < sources.size(); ++i) {
        if (e.snapshot[i].shape() == sources[i]->shape())
          e.snapshot[i].copy_from(*sources[i]);
        else
          e.snapshot[i] = sources[i]->clone();
      }
    }
    return e.value;
  }
  Entry e;
  e.grid = grid;
  for (const Tensor* s : sources) e.snapshot.push_back(s->clone());
  e.value = compute();
  entries_.push_back(std::move(e));
  return entries_.back().value;
}

// ---- table <-> planes -----------------------------------------------------------------------

Tensor patch_rows_to_planes(const Tensor& table, int64_t prefix, Grid grid) {
  const int64_t d = table.size(-1), n = grid.count();
  Tensor planes = Tensor::empty({d, grid.rows, grid.cols});
  const float* t = table.f32() + prefix * d;
  float* p = planes.f32();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) p[c * n + i] = t[i * d + c];
  return planes;
}

void planes_to_patch_rows(const Tensor& planes, Tensor& table, int64_t prefix, Grid grid,
                          bool accumulate) {
  const int64_t d = planes.size(0), n = grid.count();
  float* t = table.f32() + prefix * d;
  const float* p = planes.f32();
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < d; ++c) {
      if (accumulate)
        t[i * d + c] += p[c * n + i];
      else
        t[i * d + c] = p[c * n + i];
    }
}

// ---- Coordinate augmentation ------------------------------------------------------------------

CoordinateDraw CoordinateAugmentation::draw(uint64_t seed) const {
  Rng rng(seed);
  CoordinateDraw d;
  if (shift) {
    d.shift_y = static_cast<float>(rng.uniform(-*shift, *shift));
    d.shift_x = static_cast<float>(rng.uniform(-*shift, *shift));
  }
  if (jitter) {
    const double lj = std::log(*jitter);
    d.jitter_y = static_cast<float>(std::exp(rng.uniform(-lj, lj)));
    d.jitter_x = static_cast<float>(std::exp(rng.uniform(-lj, lj)));
  }
  if (rescale) {
    const double lr = std::log(*rescale);
    d.rescale = static_cast<float>(std::exp(rng.uniform(-lr, lr)));
  }
  return d;
}

AxisAffine integer_axis(const CoordinateDraw& d, bool rows, int64_t n) {
  const double shift = rows ? d.shift_y : d.shift_x;
  const double a = static_cast<double>(rows ? d.jitter_y : d.jitter_x) * d.rescale;
  const double centre = static_cast<double>(n - 1) / 2;
  return {a, (shift * static_cast<double>(n) / 2 - centre) * a + centre};
}

std::vector<OptionDef> coordinate_augmentation_options(const std::string& units) {
  return {{"shift", "none", "training: coordinates shifted per axis by U(-s, s)" + units, {},
           false, false, true},
          {"jitter", "none",
           "training: coordinates scaled per axis by a log-uniform factor in [1/J, J]", {}, false,
           false, true},
          {"rescale", "none",
           "training: coordinates scaled by one log-uniform factor in [1/R, R] (DINOv3 trains "
           "with 2)",
           {}, false, false, true}};
}

CoordinateAugmentation coordinate_augmentation(const Options& o) {
  return {o.number_or_none("shift"), o.number_or_none("jitter"), o.number_or_none("rescale")};
}

// ---- RoPE kernels ---------------------------------------------------------------------------

void check_qk(const std::string& kind, const Tensor& q, const Tensor& k, int64_t heads,
              int64_t head_dim, const AttnGeometry& geom) {
  for (const Tensor* t : {&q, &k}) {
    check_cpu_f32(kind.c_str(), "q/k", *t);
    if (t->ndim() != 4 || t->size(1) != heads || t->size(2) != geom.tokens() ||
        t->size(3) != head_dim)
      throw ShapeError(kind + ": expected q and k of shape [B, " + std::to_string(heads) + ", " +
                       std::to_string(geom.tokens()) + ", " + std::to_string(head_dim) +
                       "] (window " + geom.window.str() + ", prefix " +
                       std::to_string(geom.prefix) + "), found " + t->shape().str());
  }
  if (q.shape() != k.shape())
    throw ShapeError(kind + ": q " + q.shape().str() + " and k " + k.shape().str() + " differ");
}

namespace {

// The channels of pair p in a head of width hd: (2p, 2p+1) interleaved (RoPE-ViT, timm's
// default), or (p, p + hd/2) in halves (timm's rotate_half: DINOv3).
struct PairIndex {
  int64_t half;
  bool halves;
  int64_t first(int64_t p) const { return halves ? p : 2 * p; }
  int64_t second(int64_t p) const { return halves ? p + half : 2 * p + 1; }
};

template <bool Halves>
void rotate_rows(float* oi, const float* xi, const float* cn, const float* sn, int64_t half) {
  const PairIndex ix{half, Halves};
  for (int64_t p = 0; p < half; ++p) {
    const float a = xi[ix.first(p)], bb = xi[ix.second(p)];
    oi[ix.first(p)] = a * cn[p] - bb * sn[p];
    oi[ix.second(p)] = bb * cn[p] + a * sn[p];
  }
}

}  // namespace

void rope_rotate(Tensor& out, const Tensor& x, const Tensor& cos, const Tensor& sin, int64_t prefix,
                 bool halves) {
  const int64_t B = x.size(0), H = x.size(1), N = x.size(2), hd = x.size(3);
  const int64_t hc = cos.size(0), nw = cos.size(1), half = hd / 2;
  check_shape("rope_rotate", "out", out, x.shape());
  const float* xp = x.f32();
  float* op = out.f32();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const float* c = cos.f32() + (hc == 1 ? 0 : h) * nw * half;
      const float* s = sin.f32() + (hc == 1 ? 0 : h) * nw * half;
      const float* xs = xp + (b * H + h) * N * hd;
      float* os = op + (b * H + h) * N * hd;
      std::memcpy(os, xs, sizeof(float) * prefix * hd);
      for (int64_t n = 0; n < nw; ++n) {
        const float* xi = xs + (prefix + n) * hd;
        float* oi = os + (prefix + n) * hd;
        if (halves) {
          rotate_rows<true>(oi, xi, c + n * half, s + n * half, half);
        } else {
          rotate_rows<false>(oi, xi, c + n * half, s + n * half, half);
        }
      }
    }
}

void rope_rotate_qkv_rows(Tensor& qkv, int64_t heads, const Tensor& cos, const Tensor& sin,
                          int64_t prefix, bool halves) {
  check_cpu_f32("rope_rotate_qkv_rows", "qkv", qkv);
  const bool rows = qkv.ndim() == 3 && heads >= 1 && cos.ndim() == 3;
  const int64_t B = rows ? qkv.size(0) : 0, N = rows ? qkv.size(1) : 0;
  const int64_t D = rows ? qkv.size(2) / 3 : 0, hd = rows ? D / heads : 0;
  const int64_t hc = cos.ndim() == 3 ? cos.size(0) : 0, nw = cos.ndim() == 3 ? cos.size(1) : 0;
  const int64_t half = hd / 2;
  if (!rows || qkv.size(2) != 3 * heads * hd || hd % 2 != 0 || half != cos.size(2) ||
      N != prefix + nw || (hc != 1 && hc != heads)) {
    throw ShapeError("rope_rotate_qkv_rows: qkv " + qkv.shape().str() + " for " +
                     std::to_string(heads) + " heads does not fit the angles " +
                     cos.shape().str() + " after " + std::to_string(prefix) + " prefix tokens");
  }
  const PairIndex ix{half, halves};
  float* base = qkv.f32();
#pragma omp parallel for collapse(2)
  for (int64_t b = 0; b < B; ++b)
    for (int64_t n = 0; n < nw; ++n) {
      float* row = base + (b * N + prefix + n) * 3 * D;
      for (int64_t h = 0; h < heads; ++h) {
        const int64_t hh = hc == 1 ? 0 : h;
        const float* cn = cos.f32() + (hh * nw + n) * half;
        const float* sn = sin.f32() + (hh * nw + n) * half;
        for (float* x : {row + h * hd, row + D + h * hd}) {
          for (int64_t p = 0; p < half; ++p) {
            const float a = x[ix.first(p)], bb = x[ix.second(p)];
            x[ix.first(p)] = a * cn[p] - bb * sn[p];
            x[ix.second(p)] = bb * cn[p] + a * sn[p];
          }
        }
      }
    }
}

void rope_rotate_backward(Tensor& dx, Tensor& dangle, const Tensor& dout, const Tensor& x,
                          const Tensor& cos, const Tensor& sin, int64_t prefix, bool halves) {
  const int64_t B = x.size(0), H = x.size(1), N = x.size(2), hd = x.size(3);
  const int64_t hc = cos.size(0), nw = cos.size(1), half = hd / 2;
  check_shape("rope_rotate_backward", "dout", dout, x.shape());
  const bool want_dx = dx.defined(), want_da = dangle.defined();
  if (want_dx) check_shape("rope_rotate_backward", "dx", dx, x.shape());
  const PairIndex ix{half, halves};
  // Heads in parallel, the batch inside: dangle rows belong to one head (unless shared by all
  // heads, hc == 1, which then runs serially).
#pragma omp parallel for if (!(want_da && hc == 1))
  for (int64_t h = 0; h < H; ++h)
    for (int64_t b = 0; b < B; ++b) {
      const int64_t hh = hc == 1 ? 0 : h;
      const float* c = cos.f32() + hh * nw * half;
      const float* s = sin.f32() + hh * nw * half;
      const float* xs = x.f32() + (b * H + h) * N * hd;
      const float* ds = dout.f32() + (b * H + h) * N * hd;
      if (want_dx) {
        float* dxs = dx.f32() + (b * H + h) * N * hd;
        for (int64_t i = 0; i < prefix * hd; ++i) dxs[i] += ds[i];
      }
      for (int64_t n = 0; n < nw; ++n) {
        const float* xi = xs + (prefix + n) * hd;
        const float* di = ds + (prefix + n) * hd;
        const float* cn = c + n * half;
        const float* sn = s + n * half;
        if (want_dx) {
          // R^T: [c s; -s c]
          float* dxi = dx.f32() + (b * H + h) * N * hd + (prefix + n) * hd;
          for (int64_t p = 0; p < half; ++p) {
            const float ga = di[ix.first(p)], gb = di[ix.second(p)];
            dxi[ix.first(p)] += ga * cn[p] + gb * sn[p];
            dxi[ix.second(p)] += -ga * sn[p] + gb * cn[p];
          }
        }
        if (want_da) {
          // out_a = a c - b s, out_b = b c + a s: d out_a/dθ = -out_b, d out_b/dθ = out_a.
          float* da = dangle.f32() + (hh * nw + n) * half;
          for (int64_t p = 0; p < half; ++p) {
            const float a = xi[ix.first(p)], bb = xi[ix.second(p)];
            const float oa = a * cn[p] - bb * sn[p], ob = bb * cn[p] + a * sn[p];
            da[p] += -di[ix.first(p)] * ob + di[ix.second(p)] * oa;
          }
        }
      }
    }
}

}  // namespace vitpe::enc
