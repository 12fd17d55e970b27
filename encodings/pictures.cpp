// Pictures of encodings (see pictures.h): heatmaps with colour bars and labels, drawn with
// OpenCV primitives on a white canvas.
#include "encodings/pictures.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <opencv2/core.hpp>
#include <opencv2/imgcodecs.hpp>
#include <opencv2/imgproc.hpp>
#include <stdexcept>

#include "ops/files.h"

namespace vitpe {

namespace {

namespace fs = std::filesystem;

const cv::Scalar kInk(40, 40, 40);
const cv::Scalar kGrey(150, 150, 150);
constexpr int kFont = cv::FONT_HERSHEY_SIMPLEX;

// ---- colour maps ----------------------------------------------------------------------------

// Diverging blue - white - red (ColorBrewer RdBu, reversed): t in [0, 1], 0.5 is white. BGR.
cv::Vec3b diverging(double t) {
  static const double anchors[][3] = {{5, 48, 97},     {33, 102, 172},  {67, 147, 195},
                                      {146, 197, 222}, {209, 229, 240}, {247, 247, 247},
                                      {253, 219, 199}, {244, 165, 130}, {214, 96, 77},
                                      {178, 24, 43},   {103, 0, 31}};  // RGB
  constexpr int n = 11;
  t = std::clamp(t, 0.0, 1.0) * (n - 1);
  int i = std::min(static_cast<int>(t), n - 2);
  double f = t - i;
  cv::Vec3b c;
  for (int k = 0; k < 3; ++k)
    c[2 - k] = static_cast<uchar>(std::lround(anchors[i][k] * (1 - f) + anchors[i + 1][k] * f));
  return c;
}

// Viridis from OpenCV's table. BGR.
cv::Vec3b sequential(double t) {
  static const cv::Mat lut = [] {
    cv::Mat ramp(1, 256, CV_8UC1), out;
    for (int i = 0; i < 256; ++i) ramp.at<uchar>(0, i) = static_cast<uchar>(i);
    cv::applyColorMap(ramp, out, cv::COLORMAP_VIRIDIS);
    return out;
  }();
  int i = static_cast<int>(std::lround(std::clamp(t, 0.0, 1.0) * 255));
  return lut.at<cv::Vec3b>(0, i);
}

// A value range and the colour map used for it.
struct Scale {
  double lo, hi;
  bool diverging;
  cv::Vec3b color(double v) const {
    double t = hi > lo ? (v - lo) / (hi - lo) : 0.5;
    return diverging ? vitpe::diverging(t) : sequential(t);
  }
};

// Symmetric diverging scale when values take both signs, else viridis over [min, max].
Scale auto_scale(const std::vector<float>& v) {
  float lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
  if (lo < 0 && hi > 0) {
    double m = std::max(-lo, hi);
    return {-m, m, true};
  }
  if (lo == hi) return {lo - 1.0, hi + 1.0, false};
  return {lo, hi, false};
}

// ---- text and axes --------------------------------------------------------------------------

std::string fmt(double v) {
  char buf[32];
  double a = std::fabs(v);
  if (a != 0 && (a < 0.01 || a >= 1e4))
    std::snprintf(buf, sizeof buf, "%.1e", v);
  else
    std::snprintf(buf, sizeof buf, "%.3g", v);
  return buf;
}

cv::Size text_size(const std::string& s, double scale, int thick = 1) {
  int base = 0;
  return cv::getTextSize(s, kFont, scale, thick, &base);
}

// Text with its left end at x (align 0), centred (1) or right end (2); y is the baseline.
void text(cv::Mat& img, const std::string& s, int x, int y, double scale, int align = 0,
          const cv::Scalar& color = kInk, int thick = 1) {
  cv::Size sz = text_size(s, scale, thick);
  int x0 = align == 0 ? x : align == 1 ? x - sz.width / 2 : x - sz.width;
  cv::putText(img, s, {x0, y}, kFont, scale, color, thick, cv::LINE_AA);
}

// Vertical text reading bottom to top, centred on (cx, cy).
void vtext(cv::Mat& img, const std::string& s, int cx, int cy, double scale) {
  cv::Size sz = text_size(s, scale);
  cv::Mat t(sz.height + 8, sz.width + 4, CV_8UC3, cv::Scalar(255, 255, 255));
  cv::putText(t, s, {2, sz.height + 2}, kFont, scale, kInk, 1, cv::LINE_AA);
  cv::Mat r;
  cv::rotate(t, r, cv::ROTATE_90_COUNTERCLOCKWISE);
  int x0 = cx - r.cols / 2, y0 = cy - r.rows / 2;
  if (x0 < 0 || y0 < 0 || x0 + r.cols > img.cols || y0 + r.rows > img.rows) return;
  r.copyTo(img(cv::Rect(x0, y0, r.cols, r.rows)));
}

// A vertical colour bar at (x, y) of size w x h with ticks at lo, mid and hi, and a caption.
void colour_bar(cv::Mat& img, const Scale& s, int x, int y, int w, int h,
                const std::string& caption) {
  for (int i = 0; i < h; ++i) {
    double t = 1.0 - static_cast<double>(i) / (h - 1);
    cv::Vec3b c = s.color(s.lo + t * (s.hi - s.lo));
    cv::line(img, {x, y + i}, {x + w - 1, y + i}, cv::Scalar(c[0], c[1], c[2]));
  }
  cv::rectangle(img, {x, y}, {x + w - 1, y + h - 1}, kGrey);
  for (int k = 0; k < 5; ++k) {
    double t = k / 4.0;
    int yy = y + static_cast<int>(std::lround((1 - t) * (h - 1)));
    cv::line(img, {x + w, yy}, {x + w + 4, yy}, kInk);
    text(img, fmt(s.lo + t * (s.hi - s.lo)), x + w + 7, yy + 5, 0.42);
  }
  vtext(img, caption, x + w + 62, y + h / 2, 0.45);
}

void write_png(const cv::Mat& img, const fs::path& path, std::vector<std::string>& out) {
  std::vector<uchar> buf;
  if (!cv::imencode(".png", img, buf)) throw std::runtime_error("cannot encode " + path.string());
  write_file_atomic(path.string(), {ByteSpan{buf.data(), buf.size()}});
  out.push_back(path.string());
}

std::string file_stem(const std::string& kind) {
  std::string s = kind;
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_') c = '_';
  return s;
}

// Evenly spaced tick values 0, step, 2 step, ... < n with about `count` ticks.
std::vector<int64_t> ticks(int64_t n, int count) {
  static const int64_t nice[] = {1, 2, 4, 5, 8, 10, 16, 20, 25, 32, 50, 64, 100, 128, 200, 256};
  int64_t step = nice[std::size(nice) - 1];
  for (int64_t st : nice)
    if ((n + st - 1) / st <= count) {
      step = st;
      break;
    }
  std::vector<int64_t> t;
  for (int64_t v = 0; v < n; v += step) t.push_back(v);
  return t;
}

// ---- token pictures ---------------------------------------------------------------------------

// table: [prefix + N, D] -> values heatmap of the N patch rows.
cv::Mat values_picture(const Tensor& table, int64_t prefix, Grid grid, const std::string& title) {
  const int64_t N = grid.count(), D = table.size(1);
  std::vector<float> v(table.f32() + prefix * D, table.f32() + (prefix + N) * D);
  Scale s = auto_scale(v);
  // Cells: at least 1 px, the map about 800 x 560 px.
  const int cw = static_cast<int>(std::max<int64_t>(1, 800 / D));
  const int ch = static_cast<int>(std::max<int64_t>(1, 560 / N));
  cv::Mat map(static_cast<int>(N), static_cast<int>(D), CV_8UC3);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t c = 0; c < D; ++c)
      map.at<cv::Vec3b>(static_cast<int>(i), static_cast<int>(c)) = s.color(v[i * D + c]);
  cv::Size size(static_cast<int>(D) * cw, static_cast<int>(N) * ch);
  if (size.width > 1000) size.width = 1000;
  if (size.height > 800) size.height = 800;
  cv::Mat big;
  cv::resize(map, big, size, 0, 0, size.width < D ? cv::INTER_AREA : cv::INTER_NEAREST);

  const int left = 110, top = 62, right = 150, bottom = 70;
  cv::Mat img(top + big.rows + bottom, left + big.cols + right, CV_8UC3, cv::Scalar(255, 255, 255));
  big.copyTo(img(cv::Rect(left, top, big.cols, big.rows)));
  cv::rectangle(img, {left - 1, top - 1}, {left + big.cols, top + big.rows}, kGrey);
  text(img, title, left, 26, 0.6, 0, kInk, 1);
  text(img,
       "rows: patches in row-major order (" + std::to_string(prefix) +
           (prefix == 1 ? " prefix row" : " prefix rows") + " not shown); columns: channels",
       left, 48, 0.45, 0, kGrey);
  // x ticks: channels
  for (int64_t c : ticks(D, 8)) {
    int x = left + static_cast<int>((c + 0.5) * big.cols / D);
    cv::line(img, {x, top + big.rows}, {x, top + big.rows + 5}, kInk);
    text(img, std::to_string(c), x, top + big.rows + 20, 0.42, 1);
  }
  text(img, "channel", left + big.cols / 2, top + big.rows + 45, 0.5, 1);
  // y ticks: the first patch of grid rows
  for (int64_t r : ticks(grid.rows, 8)) {
    int y = top + static_cast<int>(r * grid.cols * big.rows / N);
    cv::line(img, {left - 5, y}, {left - 1, y}, kInk);
    text(img, "row " + std::to_string(r), left - 8, y + 5, 0.42, 2);
  }
  vtext(img, "patch (row-major, top row first)", 16, top + big.rows / 2, 0.5);
  colour_bar(img, s, left + big.cols + 20, top, 18, big.rows, "value");
  return img;
}

// table: [prefix + N, D] -> ViT Figure 7: a rows x cols grid of rows x cols similarity maps.
cv::Mat similarity_picture(const Tensor& table, int64_t prefix, Grid grid,
                           const std::string& title) {
  const int64_t N = grid.count(), D = table.size(1);
  const float* t = table.f32() + prefix * D;
  std::vector<double> norm(N);
  for (int64_t i = 0; i < N; ++i) {
    double s = 0;
    for (int64_t c = 0; c < D; ++c) s += static_cast<double>(t[i * D + c]) * t[i * D + c];
    norm[i] = std::sqrt(s);
  }
  const int gap = 3;
  // px per patch: the whole about 900 px wide and 720 px tall at most
  const int cell = static_cast<int>(std::max<int64_t>(
      1, std::min((900 / grid.cols - gap) / grid.cols, (720 / grid.rows - gap) / grid.rows)));
  const int sw = static_cast<int>(grid.cols) * cell, sh = static_cast<int>(grid.rows) * cell;
  const int left = 80, top = 70, right = 150, bottom = 70;
  const int W = static_cast<int>(grid.cols) * (sw + gap) - gap;
  const int H = static_cast<int>(grid.rows) * (sh + gap) - gap;
  cv::Mat img(top + H + bottom, left + W + right, CV_8UC3, cv::Scalar(255, 255, 255));
  // All similarities first: the colour range runs from their minimum (rounded down to 0.1) to 1,
  // since sin-cos encodings stay well above -1 and a fixed [-1, 1] range would hide them.
  std::vector<float> sim(N * N);
  for (int64_t i = 0; i < N; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double dot = 0;
      for (int64_t c = 0; c < D; ++c) dot += static_cast<double>(t[i * D + c]) * t[j * D + c];
      sim[i * N + j] =
          static_cast<float>(norm[i] > 0 && norm[j] > 0 ? dot / (norm[i] * norm[j]) : 0.0);
    }
  const double lo = std::floor(*std::min_element(sim.begin(), sim.end()) * 10.0 - 1e-6) / 10.0;
  Scale s{std::max(-1.0, std::min(lo, 0.9)), 1.0, false};
  for (int64_t i = 0; i < N; ++i) {
    const int ox = left + static_cast<int>(i % grid.cols) * (sw + gap);
    const int oy = top + static_cast<int>(i / grid.cols) * (sh + gap);
    for (int64_t j = 0; j < N; ++j) {
      cv::Vec3b col = s.color(sim[i * N + j]);
      cv::rectangle(img,
                    cv::Rect(ox + static_cast<int>(j % grid.cols) * cell,
                             oy + static_cast<int>(j / grid.cols) * cell, cell, cell),
                    cv::Scalar(col[0], col[1], col[2]), cv::FILLED);
    }
  }
  text(img, title, left, 26, 0.6);
  text(img, "each small map: cosine similarity of one patch's encoding to every patch", left, 48,
       0.45, 0, kGrey);
  const int label_every = grid.cols > 16 ? 4 : grid.cols > 8 ? 2 : 1;
  for (int64_t c = 0; c < grid.cols; c += label_every)
    text(img, std::to_string(c + 1), left + static_cast<int>(c) * (sw + gap) + sw / 2, top + H + 20,
         0.42, 1);
  for (int64_t r = 0; r < grid.rows; r += label_every)
    text(img, std::to_string(r + 1), left - 8, top + static_cast<int>(r) * (sh + gap) + sh / 2 + 5,
         0.42, 2);
  text(img, "input patch column", left + W / 2, top + H + 45, 0.5, 1);
  vtext(img, "input patch row", 22, top + H / 2, 0.5);
  colour_bar(img, s, left + W + 20, top, 18, H, "cosine similarity");
  return img;
}

// ---- attention pictures -----------------------------------------------------------------------

// maps: [H][2][N] values over the key grid for query = centre and query = top-left.
cv::Mat attention_picture(const std::vector<std::vector<std::vector<float>>>& maps, Grid grid,
                          const Scale& s, const std::string& title, const std::string& subtitle,
                          const std::string& bar_caption,
                          const std::vector<std::string>& head_notes) {
  const int64_t H = static_cast<int64_t>(maps.size());
  const int64_t longest = std::max(grid.rows, grid.cols);
  const int panel = static_cast<int>(std::clamp<int64_t>(1100 / std::max<int64_t>(H, 4), 60, 200));
  const int cell = static_cast<int>(std::max<int64_t>(1, panel / longest));
  const int pw = static_cast<int>(grid.cols) * cell, ph = static_cast<int>(grid.rows) * cell;
  const int gap = 16, left = 130, top = 100, right = 160, bottom = 40;
  const int W = static_cast<int>(H) * (pw + gap) - gap, Hh = 2 * (ph + 34) - 10;
  cv::Mat img(top + Hh + bottom, left + std::max(W, 420) + right, CV_8UC3,
              cv::Scalar(255, 255, 255));
  text(img, title, 20, 26, 0.6);
  text(img, subtitle, 20, 50, 0.45, 0, kGrey);
  const int64_t centre = (grid.rows / 2) * grid.cols + grid.cols / 2;
  const std::string row_names[2] = {"query: centre", "query: corner"};
  std::string where[2] = {"(row ", "(row 0, col 0)"};
  where[0] += std::to_string(grid.rows / 2);
  where[0] += ", col ";
  where[0] += std::to_string(grid.cols / 2);
  where[0] += ")";
  for (int which = 0; which < 2; ++which) {
    const int oy = top + which * (ph + 34);
    text(img, row_names[which], left - 12, oy + ph / 2, 0.45, 2);
    text(img, where[which], left - 12, oy + ph / 2 + 18, 0.42, 2, kGrey);
    for (int64_t h = 0; h < H; ++h) {
      const int ox = left + static_cast<int>(h) * (pw + gap);
      if (which == 0) {
        text(img, "head " + std::to_string(h), ox + pw / 2, top - (head_notes.empty() ? 10 : 26),
             0.45, 1);
        if (!head_notes.empty()) text(img, head_notes[h], ox + pw / 2, top - 8, 0.4, 1, kGrey);
      }
      const auto& m = maps[h][which];
      for (int64_t j = 0; j < grid.count(); ++j) {
        cv::Vec3b col = s.color(m[j]);
        cv::rectangle(img,
                      cv::Rect(ox + static_cast<int>(j % grid.cols) * cell,
                               oy + static_cast<int>(j / grid.cols) * cell, cell, cell),
                      cv::Scalar(col[0], col[1], col[2]), cv::FILLED);
      }
      cv::rectangle(img, {ox - 1, oy - 1}, {ox + pw, oy + ph}, kGrey);
      const int64_t q = which == 0 ? centre : 0;
      cv::Rect qr(ox + static_cast<int>(q % grid.cols) * cell,
                  oy + static_cast<int>(q / grid.cols) * cell, cell, cell);
      cv::rectangle(img, qr, cv::Scalar(0, 0, 0), std::max(1, cell / 6));
    }
  }
  colour_bar(img, s, left + std::max(W, 420) + 20, top, 18, Hh, bar_caption);
  return img;
}

// ---- phase pictures ---------------------------------------------------------------------------

// freqs: [H, hd/2, 2] (x, y per channel pair) at the built window -> per head two panels (offset
// along x, along y) of sin(f . d) over the pairs, offsets past the built window shaded.
cv::Mat phase_picture(const Tensor& freqs, Grid built, const std::vector<PhaseReach>& reaches,
                      const std::string& title) {
  const int64_t H = freqs.size(0), pairs = freqs.size(1);
  const double extent[2] = {static_cast<double>(built.cols - 1),
                            static_cast<double>(built.rows - 1)};
  double span = 2.0 * std::max(extent[0], extent[1]);
  for (const PhaseReach& r : reaches) span = std::max({span, r.x, r.y});
  span = std::max(2.0, std::ceil(span));
  const int pw = static_cast<int>(std::clamp<int64_t>(1100 / std::max<int64_t>(H, 4), 140, 260));
  const int ch = static_cast<int>(std::clamp<int64_t>(200 / pairs, 2, 24));
  const int ph = static_cast<int>(pairs) * ch;
  const int gap = 16, left = 150, top = 110, right = 160, row_gap = 52;
  const int W = static_cast<int>(H) * (pw + gap) - gap, Hh = 2 * (ph + row_gap) - row_gap;
  const int legend = 22 * static_cast<int>(reaches.size()) + 30;
  cv::Mat img(top + Hh + 40 + legend, left + std::max(W, 520) + right, CV_8UC3,
              cv::Scalar(255, 255, 255));
  text(img, title, 20, 26, 0.6);
  text(img,
       "sin(f . d) of each channel pair (rows) against the query-key offset d, in the trained "
       "window's coordinates:",
       20, 50, 0.42, 0, kGrey);
  text(img,
       "the offsets it held (|d| <= " + fmt(extent[0]) + " along x, " + fmt(extent[1]) +
           " along y) clear, the rest shaded",
       20, 68, 0.42, 0, kGrey);
  static const cv::Scalar marks[] = {{0, 0, 0},     {0, 130, 0},   {170, 0, 170},
                                     {0, 110, 230}, {160, 110, 0}, {90, 90, 90}};
  const Scale s{-1, 1, true};
  const std::string axis_names[2] = {"offset along x", "offset along y"};
  const std::string axis_notes[2] = {"(columns)", "(rows)"};
  auto px_of = [&](double d) {
    return static_cast<int>(std::lround((d + span) / (2 * span) * pw));
  };
  for (int a = 0; a < 2; ++a) {
    const int oy = top + a * (ph + row_gap);
    text(img, axis_names[a], left - 12, oy + ph / 2, 0.45, 2);
    text(img, axis_notes[a], left - 12, oy + ph / 2 + 18, 0.42, 2, kGrey);
    for (int64_t h = 0; h < H; ++h) {
      const int ox = left + static_cast<int>(h) * (pw + gap);
      if (a == 0) text(img, "head " + std::to_string(h), ox + pw / 2, top - 10, 0.45, 1);
      const float* f = freqs.f32() + h * pairs * 2;
      for (int x = 0; x < pw; ++x) {
        const double d = -span + (x + 0.5) * 2 * span / pw;
        const bool held = std::fabs(d) <= extent[a] + 1e-9;
        for (int64_t k = 0; k < pairs; ++k) {
          cv::Vec3b c = s.color(std::sin(f[k * 2 + a] * d));
          if (!held)
            for (int i = 0; i < 3; ++i) c[i] = static_cast<uchar>(c[i] * 0.45 + 160 * 0.55);
          cv::line(img, {ox + x, oy + static_cast<int>(k) * ch},
                   {ox + x, oy + static_cast<int>(k + 1) * ch - 1}, cv::Scalar(c[0], c[1], c[2]));
        }
      }
      cv::rectangle(img, {ox - 1, oy - 1}, {ox + pw, oy + ph}, kGrey);
      for (size_t r = 0; r < reaches.size(); ++r) {
        const double reach = a == 0 ? reaches[r].x : reaches[r].y;
        for (double d : {-reach, reach}) {
          const int x = ox + std::clamp(px_of(d), 0, pw - 1);
          cv::line(img, {x, oy - 4}, {x, oy + ph + 3}, marks[r % std::size(marks)], 2);
        }
      }
      // Ticks at the ends, the held range and 0; the left end is labelled on the first head only,
      // so neighbouring panels' labels do not run together.
      for (double d : {-span, -extent[a], 0.0, extent[a], span}) {
        const int x = ox + std::clamp(px_of(d), 0, pw - 1);
        cv::line(img, {x, oy + ph}, {x, oy + ph + 5}, kInk);
        if (d == 0.0 || d == span || (d == -span && h == 0))
          text(img, fmt(d), x, oy + ph + 19, 0.38, d == span ? 2 : d == 0.0 ? 1 : 0);
      }
    }
    vtext(img, "channel pair", left - 128, oy + ph / 2, 0.42);
  }
  int ly = top + Hh + 40;
  text(img, "marks: how far a larger window's offsets reach", left, ly, 0.45);
  for (size_t r = 0; r < reaches.size(); ++r) {
    ly += 22;
    const cv::Scalar& m = marks[r % std::size(marks)];
    cv::line(img, {left, ly - 5}, {left + 24, ly - 5}, m, 2);
    text(img,
         reaches[r].label + ": |d| up to " + fmt(reaches[r].x) + " along x, " + fmt(reaches[r].y) +
             " along y",
         left + 32, ly, 0.42);
  }
  colour_bar(img, s, left + std::max(W, 520) + 20, top, 18, Hh, "sin(f . d)");
  return img;
}

Tensor rotation_freqs(AttentionEncoding& encoding, const AttnGeometry& geom) {
  if (!encoding.has_rotation())
    throw std::invalid_argument("phase picture: " + encoding.kind() +
                                " does not rotate queries and keys");
  Tensor f = encoding.terms(geom).rotation_freqs;
  if (f.ndim() != 3 || f.size(2) != 2)
    throw std::invalid_argument("phase picture: " + encoding.kind() +
                                " gave no rotation frequencies [H, hd/2, 2]");
  return f;
}

}  // namespace

std::vector<std::string> write_token_pictures(TokenEncoding& encoding, Grid grid,
                                              const std::string& dir, const std::string& title) {
  fs::create_directories(dir);
  Tensor table = encoding.table(grid);
  const int64_t prefix = table.size(0) - grid.count();
  const std::string stem = file_stem(encoding.kind());
  std::vector<std::string> out;
  write_png(values_picture(table, prefix, grid, title + ": values"),
            fs::path(dir) / (stem + "_values.png"), out);
  write_png(similarity_picture(table, prefix, grid, title + ": position similarity"),
            fs::path(dir) / (stem + "_similarity.png"), out);
  return out;
}

std::vector<std::string> write_attention_pictures(AttentionEncoding& encoding, int64_t heads,
                                                  int64_t head_dim, const AttnGeometry& geom,
                                                  const std::string& dir,
                                                  const std::string& title) {
  fs::create_directories(dir);
  const int64_t N = geom.tokens(), P = geom.prefix, nw = geom.window.count();
  const int64_t centre = (geom.window.rows / 2) * geom.window.cols + geom.window.cols / 2;
  std::vector<std::vector<std::vector<float>>> maps(heads, std::vector<std::vector<float>>(2));
  std::vector<float> all;
  std::string subtitle, caption;
  std::vector<std::string> head_notes;
  Scale s{-1, 1, true};
  if (encoding.has_bias()) {
    Tensor b = Tensor::empty({heads, N, N});
    encoding.bias(b, geom);
    for (int64_t h = 0; h < heads; ++h)
      for (int which = 0; which < 2; ++which) {
        const int64_t q = P + (which == 0 ? centre : 0);
        maps[h][which].assign(b.f32() + (h * N + q) * N + P, b.f32() + (h * N + q) * N + N);
      }
    // Each head on its own scale: ALiBi's slopes span 2^-8 .. 2^-8/H, so a shared scale would
    // leave most heads flat. The head's max |bias| is written above its maps.
    for (int64_t h = 0; h < heads; ++h) {
      float m = 0;
      for (const auto& v : maps[h])
        for (float x : v) m = std::max(m, std::fabs(x));
      head_notes.push_back("max |b| " + fmt(m));
      for (auto& v : maps[h])
        for (float& x : v) x = m > 0 ? x / m : 0.f;
      for (const auto& v : maps[h]) all.insert(all.end(), v.begin(), v.end());
    }
    s = auto_scale(all);
    subtitle =
        "bias added to the attention logits, b[head, query, key], over the key grid "
        "(query marked)";
    caption = "bias / max |bias| of its head";
  } else {
    // q = k = ones: <R(p) 1, R(p') 1> / hd = mean over pairs of cos(angle(p) - angle(p')).
    Tensor ones = Tensor::full({1, heads, N, head_dim}, 1.f);
    Tensor qo = Tensor::empty(ones.shape()), ko = Tensor::empty(ones.shape());
    encoding.rotate(qo, ko, ones, ones, geom);
    for (int64_t h = 0; h < heads; ++h)
      for (int which = 0; which < 2; ++which) {
        const int64_t q = P + (which == 0 ? centre : 0);
        const float* qv = qo.f32() + (h * N + q) * head_dim;
        for (int64_t j = 0; j < nw; ++j) {
          const float* kv = ko.f32() + (h * N + P + j) * head_dim;
          double d = 0;
          for (int64_t c = 0; c < head_dim; ++c) d += static_cast<double>(qv[c]) * kv[c];
          maps[h][which].push_back(static_cast<float>(d / head_dim));
        }
      }
    subtitle =
        "score <R(query) q, R(key) k> / hd with q = k = ones (= mean over channel pairs "
        "of cos(angle difference); also the average over random q = k)";
    caption = "rotation-induced score";
  }
  std::vector<std::string> out;
  write_png(attention_picture(maps, geom.window, s, title, subtitle, caption, head_notes),
            fs::path(dir) / (file_stem(encoding.kind()) + "_attention.png"), out);
  return out;
}

std::vector<std::string> write_encoding_pictures(const std::string& spec_text,
                                                 const PictureOptions& o, const std::string& dir) {
  EncodingSpec spec = parse_encoding(spec_text);
  Rng rng(o.seed);
  std::vector<std::string> out;
  const std::string where = " (" + o.grid.str() + " grid";
  if (auto t = make_token_encoding(spec, o.dim, o.grid, o.prefix, rng)) {
    const bool learned = !t->params().empty();
    auto p = write_token_pictures(
        *t, o.grid, dir,
        t->kind() + where + ", D=" + std::to_string(o.dim) + (learned ? ", at init)" : ")"));
    out.insert(out.end(), p.begin(), p.end());
  }
  if (o.heads < 1 || o.dim % o.heads != 0)
    throw std::invalid_argument("pictures: dim " + std::to_string(o.dim) +
                                " must be divisible by heads " + std::to_string(o.heads));
  const int64_t hd = o.dim / o.heads;
  if (auto a = make_attention_encoding(spec, o.heads, hd, o.grid, o.prefix, rng)) {
    const bool learned = !a->params().empty();
    const std::string what = a->kind() + where + ", " + std::to_string(o.heads) + " heads of " +
                             std::to_string(hd) + (learned ? ", at init)" : ")");
    auto p = write_attention_pictures(*a, o.heads, hd, {o.grid, o.prefix}, dir, what);
    out.insert(out.end(), p.begin(), p.end());
    if (a->has_rotation()) {
      p = write_phase_picture(*a, o.heads, {o.grid, o.prefix}, {}, dir, what + ": phase");
      out.insert(out.end(), p.begin(), p.end());
    }
  }
  return out;
}

PhaseReach phase_reach(AttentionEncoding& encoding, const AttnGeometry& built,
                       const AttnGeometry& other, const std::string& label) {
  const Tensor f0 = rotation_freqs(encoding, built), f1 = rotation_freqs(encoding, other);
  // The ratio of the largest frequency per axis: the policy scales every pair of an axis alike.
  double ratio[2] = {1.0, 1.0};
  for (int a = 0; a < 2; ++a) {
    double m0 = 0, m1 = 0;
    for (int64_t i = 0; i < f0.numel() / 2; ++i) {
      m0 = std::max(m0, std::fabs(static_cast<double>(f0.f32()[2 * i + a])));
      m1 = std::max(m1, std::fabs(static_cast<double>(f1.f32()[2 * i + a])));
    }
    if (m0 > 0) ratio[a] = m1 / m0;
  }
  return {label, ratio[0] * static_cast<double>(other.window.cols - 1),
          ratio[1] * static_cast<double>(other.window.rows - 1)};
}

std::vector<std::string> write_phase_picture(AttentionEncoding& encoding, int64_t heads,
                                             const AttnGeometry& built,
                                             const std::vector<PhaseReach>& reaches,
                                             const std::string& dir, const std::string& title) {
  const Tensor f = rotation_freqs(encoding, built);
  if (f.size(0) != heads)
    throw std::invalid_argument("phase picture: " + encoding.kind() + " has " +
                                std::to_string(f.size(0)) + " heads, expected " +
                                std::to_string(heads));
  fs::create_directories(dir);
  std::vector<std::string> out;
  write_png(phase_picture(f, built.window, reaches, title),
            fs::path(dir) / (file_stem(encoding.kind()) + "_phase.png"), out);
  return out;
}

}  // namespace vitpe
