// Terminal table, JSON, CSV and the HTML report of a comparison (see report.h).
#include "vit/compare/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>

#include "ops/json_limits.h"
#include "ops/util.h"
#include "vit/compare/diagnostics.h"
#include "vit/models/config.h"

namespace vitpe {

using json = nlohmann::ordered_json;

namespace {

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}

std::string html_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    switch (c) {
      case '&':
        o += "&amp;";
        break;
      case '<':
        o += "&lt;";
        break;
      case '>':
        o += "&gt;";
        break;
      case '"':
        o += "&quot;";
        break;
      default:
        o += c;
    }
  }
  return o;
}

std::string with_commas(int64_t n) {
  std::string s = std::to_string(n < 0 ? -n : n), o;
  for (size_t i = 0; i < s.size(); ++i) {
    if (i && (s.size() - i) % 3 == 0) o += ',';
    o += s[i];
  }
  return (n < 0 ? "-" : "") + o;
}

const char* kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                         "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

struct Series {
  std::string name;
  std::string color;
  std::vector<double> x, y, err;  // err: +- half-height of an error bar (may be empty)
  // Single observations drawn as small open circles around the line (every seed's value).
  std::vector<std::pair<double, double>> points = {};
};

// "Nice" tick step for a range (1, 2 or 5 times a power of ten).
double nice_step(double range, int target) {
  double raw = range / std::max(1, target);
  double p = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * p >= raw) return m * p;
  return 10 * p;
}

// A tick label with as many decimals as the tick step needs.
std::string y_text(double y, double step) {
  const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, std::fabs(y) < step * 1e-6 ? 0.0 : y);
  return buf;
}

// A line chart as inline SVG, with axes, ticks, a legend and optional error bars.
std::string line_chart(const std::string& title, const std::string& x_label,
                       const std::string& y_label, const std::vector<Series>& series,
                       const std::vector<double>& x_ticks) {
  const double W = 640, H = 360, L = 60, R = 170, T = 34, B = 48;
  double xmin = 1e300, xmax = -1e300, ymin = 1e300, ymax = -1e300;
  for (const Series& s : series) {
    for (size_t i = 0; i < s.x.size(); ++i) {
      double e = s.err.empty() ? 0 : s.err[i];
      xmin = std::min(xmin, s.x[i]);
      xmax = std::max(xmax, s.x[i]);
      ymin = std::min(ymin, s.y[i] - e);
      ymax = std::max(ymax, s.y[i] + e);
    }
    for (const auto& [x, y] : s.points) {
      ymin = std::min(ymin, y);
      ymax = std::max(ymax, y);
    }
  }
  if (xmin > xmax) xmin = 0, xmax = 1, ymin = 0, ymax = 1;
  if (xmax - xmin < 1e-12) xmin -= 1, xmax += 1;
  if (ymax - ymin < 1e-9) ymin -= 0.5, ymax += 0.5;
  const double ystep = nice_step(ymax - ymin, 5);
  ymin = std::floor(ymin / ystep) * ystep;
  ymax = std::ceil(ymax / ystep) * ystep;
  auto px = [&](double x) { return L + (x - xmin) / (xmax - xmin) * (W - L - R); };
  auto py = [&](double y) { return H - B - (y - ymin) / (ymax - ymin) * (H - T - B); };
  std::ostringstream o;
  o << "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" viewBox=\"0 0 " << W << ' ' << H
    << "\" width=\"" << W << "\" height=\"" << H << "\" role=\"img\" aria-label=\""
    << html_escape(title) << "\">\n";
  o << "<text x=\"" << W / 2 - R / 2 + L / 2 << "\" y=\"20\" text-anchor=\"middle\" "
    << "class=\"ct\">" << html_escape(title) << "</text>\n";
  // Grid and y ticks.
  for (double y = ymin; y <= ymax + ystep * 1e-6; y += ystep) {
    o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << py(y) << "\" y2=\"" << py(y)
      << "\" class=\"grid\"/>";
    o << "<text x=\"" << L - 6 << "\" y=\"" << py(y) + 4 << "\" text-anchor=\"end\">"
      << y_text(y, ystep) << "</text>\n";
  }
  std::vector<double> xt = x_ticks;
  if (xt.empty()) {
    const double xs = std::max(1.0, nice_step(xmax - xmin, 8));
    for (double x = std::ceil(xmin / xs) * xs; x <= xmax + 1e-9; x += xs) xt.push_back(x);
  }
  for (double x : xt) {
    o << "<line x1=\"" << px(x) << "\" x2=\"" << px(x) << "\" y1=\"" << H - B << "\" y2=\""
      << H - B + 5 << "\" class=\"axis\"/>";
    o << "<text x=\"" << px(x) << "\" y=\"" << H - B + 18 << "\" text-anchor=\"middle\">"
      << fmt("%g", x) << "</text>\n";
  }
  o << "<line x1=\"" << L << "\" x2=\"" << W - R << "\" y1=\"" << H - B << "\" y2=\"" << H - B
    << "\" class=\"axis\"/><line x1=\"" << L << "\" x2=\"" << L << "\" y1=\"" << T << "\" y2=\""
    << H - B << "\" class=\"axis\"/>\n";
  o << "<text x=\"" << (L + W - R) / 2 << "\" y=\"" << H - 10 << "\" text-anchor=\"middle\">"
    << html_escape(x_label) << "</text>\n";
  o << "<text transform=\"translate(16," << (T + H - B) / 2
    << ") rotate(-90)\" text-anchor=\"middle\">" << html_escape(y_label) << "</text>\n";
  // Series.
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    if (s.x.empty()) continue;
    o << "<g class=\"series\"><polyline fill=\"none\" stroke=\"" << s.color
      << "\" stroke-width=\"2\" points=\"";
    for (size_t i = 0; i < s.x.size(); ++i) o << px(s.x[i]) << ',' << py(s.y[i]) << ' ';
    o << "\"/>";
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!s.err.empty() && s.err[i] > 0) {
        o << "<line x1=\"" << px(s.x[i]) << "\" x2=\"" << px(s.x[i]) << "\" y1=\""
          << py(s.y[i] - s.err[i]) << "\" y2=\"" << py(s.y[i] + s.err[i]) << "\" stroke=\""
          << s.color << "\"/>";
      }
      o << "<circle cx=\"" << px(s.x[i]) << "\" cy=\"" << py(s.y[i]) << "\" r=\"3\" fill=\""
        << s.color << "\"><title>" << html_escape(s.name) << ": " << fmt("%g", s.x[i]) << ", "
        << fmt("%.4g", s.y[i]) << "</title></circle>";
    }
    for (const auto& [x, y] : s.points) {
      o << "<circle class=\"seed\" cx=\"" << px(x) << "\" cy=\"" << py(y)
        << "\" r=\"2.5\" fill=\"none\" stroke-opacity=\"0.7\" stroke=\"" << s.color << "\"><title>"
        << html_escape(s.name) << ", one seed: " << fmt("%g", x) << ", " << fmt("%.4g", y)
        << "</title></circle>";
    }
    o << "</g>\n";
    // Legend.
    const double ly = T + 14 + 18 * static_cast<double>(k);
    o << "<line x1=\"" << W - R + 12 << "\" x2=\"" << W - R + 32 << "\" y1=\"" << ly << "\" y2=\""
      << ly << "\" stroke=\"" << s.color << "\" stroke-width=\"3\"/>";
    o << "<text x=\"" << W - R + 38 << "\" y=\"" << ly + 4 << "\">" << html_escape(s.name)
      << "</text>\n";
  }
  o << "</svg>\n";
  return o.str();
}

// "+1.23 [-0.40, 2.86]" in percent, "*" when the interval excludes zero.
std::string diff_cell(const Interval& d) {
  if (d.n == 0) return "-";
  std::string c = fmt("%+.2f", 100 * d.mean);
  if (d.n >= 2) {
    c += " [" + fmt("%+.2f", 100 * d.low()) + ", " + fmt("%+.2f", 100 * d.high()) + "]";
    if (d.excludes_zero()) c += "*";
  }
  return c;
}

// Per encoding: the mean over seeds of a history field at each epoch, in `unit`s.
std::vector<Series> curves(const CompareResults& r, double EpochRecord::*field, double unit) {
  std::vector<Series> out;
  for (size_t e = 0; e < r.encodings.size(); ++e) {
    Series s{r.encodings[e], kColors[e % 10], {}, {}, {}};
    for (const auto& [epoch, mean] : epoch_means(r, r.encodings[e], field, unit)) {
      s.x.push_back(static_cast<double>(epoch));
      s.y.push_back(mean);
    }
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace

namespace {
// The protocols the columns name, in column order.
std::vector<std::string> used_protocols(const CompareResults& r) {
  std::vector<std::string> out;
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    const std::string p = column_protocol(r, k);
    if (!p.empty() && !is_train_column(r, k) && std::find(out.begin(), out.end(), p) == out.end())
      out.push_back(p);
  }
  return out;
}
}  // namespace

std::string terminal_table(const CompareResults& r) {
  std::vector<SummaryRow> rows = summarize(r);
  size_t w = 8;
  for (const auto& row : rows) w = std::max(w, row.encoding.size());
  std::ostringstream o;
  char buf[64];
  std::snprintf(buf, sizeof buf, "%-*s", static_cast<int>(w), "encoding");
  o << buf;
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    std::string h = "acc@" + column_label(r, k) + (is_train_column(r, k) ? "*" : "");
    std::snprintf(buf, sizeof buf, "  %15s", h.c_str());
    o << buf;
  }
  o << "  +params    train\n";
  for (const auto& row : rows) {
    std::snprintf(buf, sizeof buf, "%-*s", static_cast<int>(w), row.encoding.c_str());
    o << buf;
    for (size_t s = 0; s < row.mean.size(); ++s) {
      std::string cell = fmt("%.2f", 100 * row.mean[s]);
      if (row.runs > 1) cell += " +- " + fmt("%.2f", 100 * row.ci95[s]);
      std::snprintf(buf, sizeof buf, "  %15s", cell.c_str());
      o << buf;
    }
    std::snprintf(buf, sizeof buf, "  %8s  %7s", with_commas(row.params_added).c_str(),
                  Progress::format_duration(row.train_seconds).c_str());
    o << buf << '\n';
  }
  if (r.seeds.size() > 1) {
    o << "(accuracy in %, mean +- half-width of its t-based 95 % interval over " << r.seeds.size()
      << " seeds; * = training size)\n";
  } else {
    o << "(accuracy in %, one seed: no interval; * = training size)\n";
  }
  if (compares_policies(r)) {
    o << "(interp: every encoding interpolated to the new grid, coordinates rescaled into the "
         "trained range; extrap: integer coordinates past it, learned tables holding their "
         "edges)\n";
  }
  for (const std::string& p : used_protocols(r)) o << "(" << protocol_description(p) << ")\n";
  const std::vector<PairedRow> paired = paired_differences(r);
  if (r.seeds.size() > 1 && !paired.empty()) {
    o << "\npaired differences against " << reference_encoding(r)
      << " (same seed; mean [95 % t-interval], * = the interval excludes 0):\n";
    std::snprintf(buf, sizeof buf, "%-*s", static_cast<int>(w), "encoding");
    o << buf;
    for (size_t k = 0; k < r.sizes.size(); ++k) {
      std::snprintf(buf, sizeof buf, "  %26s", ("acc@" + column_label(r, k)).c_str());
      o << buf;
    }
    o << '\n';
    for (const PairedRow& row : paired) {
      std::snprintf(buf, sizeof buf, "%-*s", static_cast<int>(w), row.encoding.c_str());
      o << buf;
      for (const Interval& d : row.diff) {
        std::snprintf(buf, sizeof buf, "  %26s", diff_cell(d).c_str());
        o << buf;
      }
      o << '\n';
    }
  }
  return o.str();
}

// ---- JSON / CSV ---------------------------------------------------------------------------------

std::string results_json(const CompareResults& r) {
  json j;
  j["title"] = r.title;
  j["encodings"] = r.encodings;
  j["seeds"] = r.seeds;
  j["sizes"] = r.sizes;
  if (!r.cols.empty()) j["cols"] = r.cols;
  if (!r.policies.empty()) j["policies"] = r.policies;
  if (!r.protocols.empty()) j["protocols"] = r.protocols;
  j["columns"] = json::array();
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    j["columns"].push_back(
        {{"size", r.sizes[k]},
         {"policy", is_train_column(r, k) ? "trained size" : column_policy(r, k)},
         {"protocol", is_train_column(r, k)           ? "trained size"
                      : column_protocol(r, k).empty() ? "dataset's own"
                                                      : column_protocol(r, k)},
         {"label", column_label(r, k)}});
  }
  j["train_size"] = r.train_size;
  j["wall_seconds"] = r.wall_seconds;
  j["settings"] = json::object();
  for (const auto& [k, v] : r.settings) j["settings"][k] = v;
  j["versions"] = json::object();
  for (const auto& [k, v] : r.versions) j["versions"][k] = v;
  // The pictures the report links (those inlined are not recorded).
  json pictures = json::array();
  for (const auto& [enc, pics] : r.pictures)
    for (const Picture& p : pics)
      if (!p.file.empty())
        pictures.push_back({{"encoding", enc}, {"caption", p.caption}, {"file", p.file}});
  if (!pictures.empty()) j["pictures"] = pictures;
  j["runs"] = json::array();
  for (const RunResult& run : r.runs) {
    json h = json::array();
    for (const EpochRecord& e : run.history) h.emplace_back(epoch_record_json(e));
    j["runs"].push_back({{"encoding", run.encoding},
                         {"seed", run.seed},
                         {"params", run.params},
                         {"params_added", run.params_added},
                         {"train_seconds", run.train_seconds},
                         {"accuracy", run.accuracy},
                         {"loss", run.loss},
                         {"gflops", run.gflops},
                         {"ms_per_image", run.ms_per_image},
                         {"extension_rules", run.extension_rules},
                         {"attention_distance", run.attention_distance},
                         {"attention_entropy", run.attention_entropy},
                         {"history", h}});
  }
  json summary = json::array();
  for (const SummaryRow& row : summarize(r)) {
    summary.push_back({{"encoding", row.encoding},
                       {"runs", row.runs},
                       {"params_added", row.params_added},
                       {"train_seconds", row.train_seconds},
                       {"accuracy_mean", row.mean},
                       {"accuracy_std", row.stddev},
                       {"accuracy_ci95", row.ci95}});
  }
  j["summary"] = summary;
  j["reference"] = reference_encoding(r);
  if (!r.primary.empty()) {
    j["primary"] = r.primary;
    json contrasts = json::array();
    for (const ContrastResult& c : primary_contrasts(r)) {
      contrasts.push_back({{"contrast", c.name},
                           {"testable", c.testable},
                           {"pairs", c.n},
                           {"mean_points", c.mean},
                           {"holm_low", c.low},
                           {"holm_high", c.high},
                           {"holm_level", c.level},
                           {"simultaneous_low", c.simultaneous_low},
                           {"simultaneous_high", c.simultaneous_high},
                           {"p_t", c.p},
                           {"p_t_holm", c.p_holm},
                           {"p_signed_rank", c.p_signed_rank},
                           {"p_signed_rank_holm", c.p_signed_rank_holm},
                           {"significant", c.significant}});
    }
    j["primary_contrasts"] = contrasts;
  }
  if (r.success_threshold > 0) j["success_threshold"] = r.success_threshold;
  json paired = json::array();
  for (const PairedRow& row : paired_differences(r)) {
    json per_size = json::array();
    for (const Interval& d : row.diff) {
      per_size.push_back({{"pairs", d.n},
                          {"mean", d.mean},
                          {"ci95_low", d.low()},
                          {"ci95_high", d.high()},
                          {"excludes_zero", d.excludes_zero()}});
    }
    paired.push_back(
        {{"encoding", row.encoding}, {"against", reference_encoding(r)}, {"by_size", per_size}});
  }
  j["paired_differences"] = paired;
  j["statistics"] =
      "accuracy_ci95: half-width of the t-based 95 % interval of the mean over seeds; "
      "paired_differences: accuracy(encoding, seed) - accuracy(reference, seed) over the seeds "
      "both have, mean and its t-based 95 % interval";
  return j.dump(2) + "\n";
}

CompareResults parse_results_json(const std::string& text) {
  // A results.json may come from anywhere (`vitpe report`): read with bounded depth, sizes and
  // values, duplicate keys refused. The bounds hold thousands of runs of hundreds of columns.
  JsonLimits limits;
  limits.max_depth = 8;
  limits.max_elements = 1 << 20;
  limits.max_values = int64_t{1} << 23;
  const nlohmann::json checked = parse_json_limited(text, limits);
  if (!checked.is_object())
    throw std::runtime_error("expected a JSON object, found " + std::string(checked.type_name()));
  json j = json::parse(text);  // again, within those bounds, keeping the members' order
  CompareResults r;
  r.title = j.value("title", r.title);
  r.encodings = j.at("encodings").get<std::vector<std::string>>();
  r.seeds = j.at("seeds").get<std::vector<uint64_t>>();
  r.sizes = j.at("sizes").get<std::vector<int64_t>>();
  r.cols = j.value("cols", std::vector<int64_t>{});
  if (!r.cols.empty() && r.cols.size() != r.sizes.size())
    throw std::runtime_error("expected one width per size in \"cols\" (" +
                             std::to_string(r.sizes.size()) + "), found " +
                             std::to_string(r.cols.size()));
  r.policies = j.value("policies", std::vector<std::string>{});
  r.protocols = j.value("protocols", std::vector<std::string>{});
  r.train_size = j.at("train_size");
  r.wall_seconds = j.value("wall_seconds", 0.0);
  r.reference = j.value("reference", std::string());
  r.primary = j.value("primary", std::vector<std::string>{});
  r.success_threshold = j.value("success_threshold", 0.0);
  for (const auto& [k, v] : j.at("settings").items()) r.settings.emplace_back(k, v);
  for (const auto& [k, v] : j.at("versions").items()) r.versions.emplace_back(k, v);
  for (const json& jr : j.at("runs")) {
    RunResult run;
    run.encoding = jr.at("encoding");
    run.seed = jr.at("seed");
    run.params = jr.at("params");
    run.params_added = jr.at("params_added");
    run.train_seconds = jr.at("train_seconds");
    run.accuracy = jr.at("accuracy").get<std::vector<double>>();
    run.loss = jr.at("loss").get<std::vector<double>>();
    run.gflops = jr.value("gflops", std::vector<double>{});
    run.ms_per_image = jr.value("ms_per_image", std::vector<double>{});
    run.extension_rules = jr.value("extension_rules", std::vector<std::string>{});
    run.attention_distance =
        jr.value("attention_distance", std::vector<std::vector<std::vector<double>>>{});
    run.attention_entropy = jr.value("attention_entropy", std::vector<std::vector<double>>{});
    for (const json& h : jr.at("history")) run.history.push_back(epoch_record_from_json(h));
    r.runs.push_back(std::move(run));
  }
  if (j.contains("pictures")) {
    for (const json& jp : j.at("pictures")) {
      Picture p;
      p.caption = jp.at("caption").get<std::string>();
      p.file = jp.at("file").get<std::string>();
      const std::string enc = jp.at("encoding").get<std::string>();
      if (r.pictures.empty() || r.pictures.back().first != enc)
        r.pictures.push_back({enc, std::vector<Picture>{}});
      r.pictures.back().second.push_back(std::move(p));
    }
  }
  return r;
}

std::string results_csv(const CompareResults& r) {
  std::ostringstream o;
  o << "encoding,seed,params,params_added,train_seconds";
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    std::string c = column_label(r, k);
    std::replace(c.begin(), c.end(), ' ', '_');
    o << ",acc_" << c << ",loss_" << c;
  }
  o << '\n';
  for (const RunResult& run : r.runs) {
    o << csv_field(run.encoding) << ',' << run.seed << ',' << run.params << ',' << run.params_added
      << ',' << fmt("%.3f", run.train_seconds);
    for (size_t s = 0; s < r.sizes.size(); ++s) {
      o << ',' << (s < run.accuracy.size() ? fmt("%.6f", run.accuracy[s]) : "") << ','
        << (s < run.loss.size() ? fmt("%.6f", run.loss[s]) : "");
    }
    o << '\n';
  }
  return o.str();
}

// ---- HTML ---------------------------------------------------------------------------------------

std::string base64_encode(const std::vector<uint8_t>& b) {
  static const char* t = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string o;
  o.reserve((b.size() + 2) / 3 * 4);
  size_t i = 0;
  for (; i + 2 < b.size(); i += 3) {
    uint32_t v = (uint32_t(b[i]) << 16) | (uint32_t(b[i + 1]) << 8) | b[i + 2];
    o += t[v >> 18];
    o += t[(v >> 12) & 63];
    o += t[(v >> 6) & 63];
    o += t[v & 63];
  }
  if (i + 1 == b.size()) {
    uint32_t v = uint32_t(b[i]) << 16;
    o += t[v >> 18];
    o += t[(v >> 12) & 63];
    o += "==";
  } else if (i + 2 == b.size()) {
    uint32_t v = (uint32_t(b[i]) << 16) | (uint32_t(b[i + 1]) << 8);
    o += t[v >> 18];
    o += t[(v >> 12) & 63];
    o += t[(v >> 6) & 63];
    o += '=';
  }
  return o;
}

namespace {

void html_head(std::ostream& o, const CompareResults& r) {
  o << "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n"
    << "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n"
    << "<title>" << html_escape(r.title) << "</title>\n<style>\n"
    << "body{font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif;margin:2em auto;"
       "max-width:1100px;padding:0 1em;color:#222;background:#fff}\n"
    << "h1{font-size:1.6em;margin-bottom:.2em}h2{font-size:1.25em;margin-top:1.8em;"
       "border-bottom:1px solid #ddd;padding-bottom:.2em}\n"
    << "table{border-collapse:collapse;margin:.8em 0;font-variant-numeric:tabular-nums}\n"
    << "th,td{padding:.35em .8em;border-bottom:1px solid #e4e4e4;text-align:right}\n"
    << "th:first-child,td:first-child{text-align:left}\n"
    << "thead th{background:#f4f6f8;border-bottom:2px solid #ccc}\n"
    << "td.best{font-weight:bold;color:#0a6b2d}\n"
    << "#settings td,#versions td{text-align:left;vertical-align:top}\n"
    << "svg.chart{max-width:100%;height:auto;font-size:12px;margin:.5em 1em .5em 0}\n"
    << "svg .grid{stroke:#eee}svg .axis{stroke:#555}svg .ct{font-size:14px;font-weight:600}\n"
    << ".charts{display:flex;flex-wrap:wrap}\n"
    << ".pics{display:flex;flex-wrap:wrap;gap:1.2em}\n"
    << "figure{margin:0;text-align:center}figure img{image-rendering:pixelated;"
       "border:1px solid #ddd;max-width:540px}\n"
    << "figcaption{font-size:.85em;color:#555}\n"
    << ".muted{color:#666;font-size:.9em}code{background:#f4f4f4;padding:0 "
       ".2em;word-break:break-all}\n"
    << "</style>\n</head>\n<body>\n";
  o << "<h1>" << html_escape(r.title) << "</h1>\n<p class=\"muted\">" << r.runs.size()
    << " training runs (" << r.encodings.size() << " encodings &times; " << r.seeds.size()
    << " seed" << (r.seeds.size() == 1 ? "" : "s") << "), trained at " << r.train_size << "&times;"
    << r.train_size << ", evaluated at ";
  for (size_t s = 0; s < r.sizes.size(); ++s)
    o << (s ? ", " : "") << html_escape(column_label(r, s));
  if (compares_policies(r)) {
    o << " (interp: every encoding interpolated to the larger grid, its coordinates rescaled "
         "into the trained range; extrap: integer coordinates past the trained range, learned "
         "tables holding their edge values)";
  }
  for (const std::string& p : used_protocols(r)) o << "; " << html_escape(protocol_description(p));
  o << "; total wall time " << Progress::format_duration(r.wall_seconds) << ".</p>\n";
}

// The summary table; the best mean per size in bold.
void html_summary(std::ostream& o, const CompareResults& r, const std::vector<SummaryRow>& rows) {
  o << "<h2>Summary</h2>\n<table id=\"summary\">\n<thead><tr><th>encoding</th>";
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    o << "<th>accuracy @" << html_escape(column_label(r, k))
      << (is_train_column(r, k) ? " (train size)" : "") << "</th>";
  }
  o << "<th>plateau</th><th>params added</th><th>train time</th></tr></thead>\n<tbody>\n";
  std::vector<double> best(r.sizes.size(), -1);
  for (const auto& row : rows)
    for (size_t s = 0; s < row.mean.size(); ++s) best[s] = std::max(best[s], row.mean[s]);
  for (const auto& row : rows) {
    o << "<tr><td>" << html_escape(row.encoding) << "</td>";
    for (size_t s = 0; s < row.mean.size(); ++s) {
      o << "<td" << (row.mean[s] >= best[s] - 1e-12 ? " class=\"best\"" : "") << ">"
        << fmt("%.2f", 100 * row.mean[s]);
      if (row.runs > 1) o << " &plusmn; " << fmt("%.2f", 100 * row.ci95[s]);
      o << "</td>";
    }
    const PlateauSummary pl = plateau(r, row.encoding);
    o << "<td>"
      << (pl.runs == 0 ? std::string("-")
                       : std::to_string(pl.plateaued) + "/" + std::to_string(pl.runs) + " (max " +
                             fmt("%.2f", pl.largest_change) + ")")
      << "</td><td>" << with_commas(row.params_added) << "</td><td>"
      << Progress::format_duration(row.train_seconds) << "</td></tr>\n";
  }
  o << "</tbody>\n</table>\n<p class=\"muted\">Accuracy in % on the test split, mean over "
    << r.seeds.size() << " seed" << (r.seeds.size() == 1 ? "" : "s")
    << (r.seeds.size() > 1 ? " &plusmn; the half-width of its t-based 95 % interval "
                             "(t<sub>0.975, n&minus;1</sub> &middot; s / &radic;n)"
                           : " (one seed: no interval)")
    << ". Plateau: the runs whose test accuracy changed by at most 0.5 points over their last "
       "epoch (of the runs with two epochs or more), and the largest change in points. Params "
       "added: the parameters the positional encoding owns. Train time: mean per run (training "
       "and per-epoch evaluation).</p>\n";
}

// The pre-declared primary contrasts, Holm-adjusted over their list (t and Wilcoxon).
void html_primary(std::ostream& o, const CompareResults& r) {
  if (r.primary.empty()) return;
  std::vector<ContrastResult> rows;
  try {
    rows = primary_contrasts(r);
  } catch (const std::exception& e) {
    o << "<h2>Primary contrasts</h2>\n<p>Not computed: " << html_escape(e.what()) << "</p>\n";
    return;
  }
  o << "<h2>Primary contrasts (declared before the runs, Holm over " << rows.size()
    << ")</h2>\n<table id=\"primary\">\n<thead><tr><th>contrast</th><th>pairs</th>"
       "<th>mean (points)</th><th>Holm interval</th><th>simultaneous 95 %</th><th>p (t)</th>"
       "<th>p Holm (t)</th><th>p (Wilcoxon)</th><th>p Holm (Wilcoxon)</th></tr></thead>\n"
       "<tbody>\n";
  for (const ContrastResult& c : rows) {
    if (!c.testable) {
      o << "<tr><td>" << html_escape(c.name) << "</td><td>" << c.n
        << "</td><td colspan=\"7\">not testable yet: fewer than 2 pairs (counted in the others' "
           "adjustment)</td></tr>\n";
      continue;
    }
    o << "<tr><td>" << html_escape(c.name) << "</td><td>" << c.n << "</td><td"
      << (c.significant ? " class=\"best\"" : "") << ">" << fmt("%+.2f", c.mean)
      << (c.significant ? "*" : "") << "</td><td>[" << fmt("%+.2f", c.low) << ", "
      << fmt("%+.2f", c.high) << "] at " << fmt("%.4g", 100 * (1 - c.level)) << " %</td><td>["
      << fmt("%+.2f", c.simultaneous_low) << ", " << fmt("%+.2f", c.simultaneous_high)
      << "]</td><td>" << fmt("%.3g", c.p) << "</td><td>" << fmt("%.3g", c.p_holm) << "</td><td>"
      << fmt("%.3g", c.p_signed_rank) << "</td><td>" << fmt("%.3g", c.p_signed_rank_holm)
      << "</td></tr>\n";
  }
  // The rank test's floor: its p when all n differences have one sign (2 / 2^n for small n).
  int64_t pairs = 0;
  for (const ContrastResult& c : rows) pairs = std::max<int64_t>(pairs, c.n);
  o << "</tbody>\n</table>\n<p class=\"muted\">Accuracy points of A minus B trained with the "
       "same seed. Holm's step-down adjustment over this list keeps the chance of any false "
       "claim among them at most 5 %; bold and * where Holm's t test rejects (its interval, at "
       "the level Holm tests the contrast at, then excludes 0). Simultaneous: Bonferroni's "
       "intervals, which cover every contrast's true mean at once with probability 95 %. "
       "Wilcoxon's signed-rank test beside t for outcomes far from normal";
  if (pairs >= 2) {
    o << " (with " << pairs << " pairs its smallest p is "
      << fmt("%.3g", wilcoxon_signed_rank(std::vector<double>(pairs, 1.0)).p) << ")";
  }
  o << ". Every other difference in this report is exploratory.</p>\n";
}

// Success rates for bimodal outcomes: per encoding and column, k/n runs at or above the
// threshold, their exact 95 % interval, and the mean accuracy of the successful runs.
void html_success(std::ostream& o, const CompareResults& r) {
  if (r.success_threshold <= 0) return;
  o << "<h2>Success rates (accuracy &ge; " << fmt("%.1f", 100 * r.success_threshold)
    << " %)</h2>\n<table id=\"success\">\n<thead><tr><th>encoding</th>";
  for (size_t k = 0; k < r.sizes.size(); ++k)
    o << "<th>@" << html_escape(column_label(r, k)) << "</th>";
  o << "</tr></thead>\n<tbody>\n";
  for (const std::string& enc : r.encodings) {
    bool any = false;
    for (const RunResult& run : r.runs) any |= run.encoding == enc;
    if (!any) continue;
    o << "<tr><td>" << html_escape(enc) << "</td>";
    for (size_t k = 0; k < r.sizes.size(); ++k) {
      const SuccessSummary s = success_summary(accuracies_at(r, enc, k), r.success_threshold);
      o << "<td>" << s.successes << "/" << s.n << " [" << fmt("%.0f", 100 * s.rate_low) << "-"
        << fmt("%.0f", 100 * s.rate_high) << " %]";
      if (s.successes > 0) o << ", " << fmt("%.2f", 100 * s.given_success.mean) << " given success";
      o << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</tbody>\n</table>\n<p class=\"muted\">Runs at or above the threshold of n, the exact "
       "(Clopper-Pearson) 95 % interval of the rate, and the mean accuracy of the successful "
       "runs: where outcomes are bimodal a mean over seeds and its t-interval describe neither "
       "mode.</p>\n";
}

// Paired differences against the reference encoding (several seeds only).
void html_paired(std::ostream& o, const CompareResults& r) {
  const std::vector<PairedRow> rows = paired_differences(r);
  if (r.seeds.size() < 2 || rows.empty()) return;
  o << "<h2>Paired differences against " << html_escape(reference_encoding(r))
    << (r.primary.empty() ? "" : " (exploratory, unadjusted)")
    << "</h2>\n<table id=\"paired\">\n<thead><tr><th>encoding</th>";
  for (size_t k = 0; k < r.sizes.size(); ++k)
    o << "<th>@" << html_escape(column_label(r, k))
      << (is_train_column(r, k) ? " (train size)" : "") << "</th>";
  o << "</tr></thead>\n<tbody>\n";
  for (const PairedRow& row : rows) {
    o << "<tr><td>" << html_escape(row.encoding) << "</td>";
    for (const Interval& d : row.diff) {
      o << "<td" << (d.excludes_zero() ? " class=\"best\"" : "") << ">" << html_escape(diff_cell(d))
        << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</tbody>\n</table>\n<p class=\"muted\">Accuracy points (%) of each encoding minus "
    << html_escape(reference_encoding(r))
    << " trained with the same seed (same initialisation stream, data order and augmentation), "
       "mean over the seeds and its t-based 95 % interval [low, high]; bold and * where the "
       "interval excludes zero. Pairing removes the variation between seeds that both share.</p>\n";
}

// Cost per encoding at each size: parameters added, GFLOPs and measured ms per image (means over
// the encoding's runs), and the time relative to the reference encoding.
void html_cost(std::ostream& o, const CompareResults& r, const std::vector<SummaryRow>& rows) {
  bool any = false;
  for (const RunResult& run : r.runs) any |= !run.ms_per_image.empty() && !r.sizes.empty();
  if (!any) return;
  const std::string ref = reference_encoding(r);
  const std::vector<double> base = column_means(r, ref, &RunResult::ms_per_image);
  o << "<h2>Cost per encoding</h2>\n<table id=\"cost\">\n<thead><tr><th>encoding</th>"
       "<th>params added</th>";
  for (size_t k = 0; k < r.sizes.size(); ++k)
    o << "<th>GFLOPs @" << html_escape(column_label(r, k)) << "</th>";
  for (size_t k = 0; k < r.sizes.size(); ++k)
    o << "<th>ms / image @" << html_escape(column_label(r, k)) << "</th>";
  o << "</tr></thead>\n<tbody>\n";
  for (const SummaryRow& row : rows) {
    o << "<tr><td>" << html_escape(row.encoding) << "</td><td>" << with_commas(row.params_added)
      << "</td>";
    const std::vector<double> gflops = column_means(r, row.encoding, &RunResult::gflops);
    const std::vector<double> ms = column_means(r, row.encoding, &RunResult::ms_per_image);
    for (size_t k = 0; k < r.sizes.size(); ++k)
      o << "<td>" << (std::isnan(gflops[k]) ? "-" : fmt("%.4f", gflops[k])) << "</td>";
    for (size_t k = 0; k < r.sizes.size(); ++k) {
      o << "<td>";
      if (!std::isnan(ms[k])) {
        o << fmt("%.3f", ms[k]);
        if (row.encoding != ref && !std::isnan(base[k]) && base[k] > 0)
          o << " (" << fmt("%.2f", ms[k] / base[k]) << "x)";
      } else {
        o << "-";
      }
      o << "</td>";
    }
    o << "</tr>\n";
  }
  o << "</tbody>\n</table>\n<p class=\"muted\">GFLOPs: the forward's multiply-adds &times; 2 per "
       "image (the model's estimate; the encodings' own arithmetic is small beside the "
       "matmuls). ms / image: the trained model's forward on 32 test images, median of 5 after "
       "a warm-up, mean over seeds, relative to "
    << html_escape(ref)
    << " in brackets; measured while the comparison ran, so a busy machine makes it noisy.</p>\n";
}

// The (protocol, policy) of each chart against size, in column order: one chart per pair that
// the columns other than the training size have (one "native" chart when there are none).
std::vector<std::pair<std::string, std::string>> chart_groups(const CompareResults& r) {
  std::vector<std::pair<std::string, std::string>> charts;
  for (size_t k = 0; k < r.sizes.size(); ++k) {
    const std::pair<std::string, std::string> c{column_protocol(r, k), column_policy(r, k)};
    // Non-square columns have no place on an axis of sides: their tables hold them.
    if (!is_train_column(r, k) && column_cols(r, k) == r.sizes[k] &&
        std::find(charts.begin(), charts.end(), c) == charts.end())
      charts.push_back(c);
  }
  if (charts.empty()) charts.emplace_back("", "native");
  return charts;
}

void html_charts(std::ostream& o, const CompareResults& r, const std::vector<SummaryRow>& rows) {
  o << "<h2>Accuracy versus resolution</h2>\n<div class=\"charts\">\n";
  // One chart per policy when the study compares them (each with the training-size column).
  const std::vector<std::pair<std::string, std::string>> charts = chart_groups(r);
  const bool several = charts.size() > 1 || compares_policies(r) || compares_protocols(r);
  for (const auto& group : charts) {
    // Named copies: clang 14 cannot capture structured bindings in the lambda below.
    const std::string protocol = group.first, policy = group.second;
    auto in_chart = [&](size_t k) {
      return is_train_column(r, k) ||
             (column_cols(r, k) == r.sizes[k] && column_policy(r, k) == policy &&
              column_protocol(r, k) == protocol);
    };
    std::string what = protocol;
    if (compares_policies(r)) {
      if (!what.empty()) what += ", ";
      what += policy;
    }
    std::vector<Series> res;
    std::vector<double> xt;
    for (size_t k = 0; k < r.sizes.size(); ++k)
      if (in_chart(k)) xt.push_back(static_cast<double>(r.sizes[k]));
    for (size_t e = 0; e < rows.size(); ++e) {
      Series s{rows[e].encoding, kColors[e % 10], {}, {}, {}};
      for (size_t k = 0; k < r.sizes.size() && k < rows[e].mean.size(); ++k) {
        if (!in_chart(k)) continue;
        s.x.push_back(static_cast<double>(r.sizes[k]));
        s.y.push_back(100 * rows[e].mean[k]);
        s.err.push_back(100 * rows[e].ci95[k]);
      }
      for (const RunResult& run : r.runs) {
        if (run.encoding != rows[e].encoding || r.seeds.size() < 2) continue;
        for (size_t k = 0; k < r.sizes.size() && k < run.accuracy.size(); ++k) {
          if (in_chart(k))
            s.points.emplace_back(static_cast<double>(r.sizes[k]), 100 * run.accuracy[k]);
        }
      }
      res.push_back(std::move(s));
    }
    o << line_chart(several ? "Test accuracy at each image size, " + what
                            : std::string("Test accuracy at each image size"),
                    "image size (pixels per side)", "accuracy (%)", res, xt);
  }
  o << "</div>\n";
  if (r.seeds.size() > 1) {
    o << "<p class=\"muted\">Lines: the mean over seeds with its 95 % interval; open circles: "
         "every seed's own accuracy.</p>\n";
  }

  o << "<h2>Training curves</h2>\n<div class=\"charts\">\n";
  o << line_chart("Test accuracy during training", "epoch", "accuracy (%)",
                  curves(r, &EpochRecord::test_acc, 100.0), {});
  o << line_chart("Training loss", "epoch", "loss (label-smoothed)",
                  curves(r, &EpochRecord::train_loss, 1.0), {});
  o << "</div>\n";
}

// The patch size and prefix tokens of the study's model, from the model config its settings
// record (nullopt where they hold none that reads back: the uniform baselines are left out).
std::optional<std::pair<int64_t, int64_t>> recorded_geometry(const CompareResults& r) {
  for (const auto& [key, value] : r.settings) {
    if (key.rfind("model config", 0) != 0) continue;
    try {
      const ModelConfig c = ModelConfig::from_json(value);
      if (c.patch > 0) return std::make_pair(c.patch, c.prefix_tokens());
    } catch (const std::exception&) {
    }
  }
  return std::nullopt;
}

constexpr const char* kUniformColor = "#9e9e9e";

// Attention diagnostics (ViT runs that recorded them): mean attention distance per head against
// depth at the training size, and attention entropy against the image size under each
// (protocol, policy).
void html_attention(std::ostream& o, const CompareResults& r, const std::vector<SummaryRow>& rows) {
  bool any = false;
  for (const RunResult& run : r.runs) any |= !run.attention_entropy.empty();
  if (!any) return;
  size_t k0 = 0;
  for (size_t k = 0; k < r.sizes.size(); ++k)
    if (is_train_column(r, k)) k0 = k;
  o << "<h2>Attention diagnostics</h2>\n<div class=\"charts\">\n";
  std::vector<Series> dist;
  size_t depth = 0;
  for (size_t e = 0; e < rows.size(); ++e) {
    Series s{rows[e].encoding, kColors[e % 10], {}, {}, {}};
    for (const RunResult& run : r.runs) {
      if (run.encoding != rows[e].encoding || k0 >= run.attention_distance.size()) continue;
      const auto& blocks = run.attention_distance[k0];
      for (size_t b = 0; b < blocks.size(); ++b)
        for (double v : blocks[b]) s.points.emplace_back(static_cast<double>(b + 1), v);
    }
    const std::vector<double> by_block = attention_distance_by_block(r, rows[e].encoding, k0);
    depth = std::max(depth, by_block.size());
    for (size_t b = 0; b < by_block.size(); ++b) {
      if (std::isnan(by_block[b])) continue;
      s.x.push_back(static_cast<double>(b + 1));
      s.y.push_back(by_block[b]);
    }
    if (!s.x.empty()) dist.push_back(std::move(s));
  }
  std::vector<double> blocks_axis;
  for (size_t b = 1; b <= depth; ++b) blocks_axis.push_back(static_cast<double>(b));
  // Uniform attention beside them: what a head that ignores position measures.
  const std::optional<std::pair<int64_t, int64_t>> geometry = recorded_geometry(r);
  auto grid_at = [&](size_t k) {
    return Grid{r.sizes[k] / geometry->first, column_cols(r, k) / geometry->first};
  };
  std::string uniform_note;
  if (geometry && depth > 0) {
    const Grid g = grid_at(k0);
    const double d = uniform_attention_distance(g);
    dist.push_back(
        Series{"uniform attention", kUniformColor, blocks_axis, std::vector<double>(depth, d), {}});
    uniform_note = " Grey: uniform attention, " + fmt("%.2f", d) + " patches on the " + g.str() +
                   " training grid and ln N nats over its N tokens (" +
                   fmt("%.2f", uniform_attention_entropy(geometry->second, g)) +
                   " there): a model at these lines attends without regard to position.";
  }
  o << line_chart("Mean attention distance per head, at the training size", "block",
                  "distance (patches)", dist, blocks_axis);
  // Entropy against size, one chart per (protocol, policy).
  const std::vector<std::pair<std::string, std::string>> charts = chart_groups(r);
  for (const auto& group : charts) {
    // Named copies: clang 14 cannot capture structured bindings in the lambda below.
    const std::string protocol = group.first, policy = group.second;
    std::vector<Series> ent;
    std::vector<double> xt;
    auto in_chart = [&](size_t k) {
      return is_train_column(r, k) ||
             (column_cols(r, k) == r.sizes[k] && column_policy(r, k) == policy &&
              column_protocol(r, k) == protocol);
    };
    for (size_t k = 0; k < r.sizes.size(); ++k)
      if (in_chart(k)) xt.push_back(static_cast<double>(r.sizes[k]));
    for (size_t e = 0; e < rows.size(); ++e) {
      Series s{rows[e].encoding, kColors[e % 10], {}, {}, {}};
      for (size_t k = 0; k < r.sizes.size(); ++k) {
        if (!in_chart(k)) continue;
        const double entropy = attention_entropy_mean(r, rows[e].encoding, k);
        if (std::isnan(entropy)) continue;
        s.x.push_back(static_cast<double>(r.sizes[k]));
        s.y.push_back(entropy);
      }
      if (!s.x.empty()) ent.push_back(std::move(s));
    }
    if (geometry && !ent.empty()) {
      Series u{"uniform attention", kUniformColor, {}, {}, {}};
      for (size_t k = 0; k < r.sizes.size(); ++k) {
        if (!in_chart(k)) continue;
        u.x.push_back(static_cast<double>(r.sizes[k]));
        u.y.push_back(uniform_attention_entropy(geometry->second, grid_at(k)));
      }
      ent.push_back(std::move(u));
    }
    std::string what = protocol;
    if (compares_policies(r)) {
      if (!what.empty()) what += ", ";
      what += policy;
    }
    o << line_chart(what.empty() ? std::string("Attention entropy against image size")
                                 : "Attention entropy against image size, " + what,
                    "image size (pixels per side)", "entropy (nats)", ent, xt);
  }
  o << "</div>\n<p class=\"muted\">Mean attention distance (the ViT paper's Fig. 7): the "
       "attention-weighted distance in patches from each patch query to the patch keys, averaged "
       "over queries and the first 64 test images; lines: the mean over heads and seeds at each "
       "block, circles: every head of every seed. Entropy: -&sum; p ln p of each query's attention "
       "over all tokens, averaged over blocks, heads, queries, images and seeds; uniform attention "
       "over N tokens gives ln N."
    << uniform_note << "</p>\n";
}

// A relative file path as a URL path: every byte but unreserved characters and '/'
// percent-encoded (encoding specs bring ':', '=', ',' and '+' into the folder names).
std::string url_path(const std::string& path) {
  static const char* hex = "0123456789ABCDEF";
  std::string o;
  for (unsigned char c : path) {
    if (std::isalnum(c) || c == '-' || c == '_' || c == '.' || c == '~' || c == '/') {
      o += static_cast<char>(c);
    } else {
      o += '%';
      o += hex[c >> 4];
      o += hex[c & 15];
    }
  }
  return o;
}

void html_pictures(std::ostream& o, const CompareResults& r) {
  if (r.pictures.empty()) return;
  o << "<h2>The encodings</h2>\n";
  bool linked = false;
  for (const auto& [enc, pics] : r.pictures) {
    o << "<h3>" << html_escape(enc) << "</h3>\n<div class=\"pics\">\n";
    for (const Picture& p : pics) {
      const std::string alt = html_escape(enc + ": " + p.caption);
      if (!p.file.empty()) {
        // A PNG file beside the report: linked (full size on a click), not inlined.
        const std::string url = html_escape(url_path(p.file));
        o << "<figure><a href=\"" << url << "\"><img alt=\"" << alt << "\" src=\"" << url
          << "\" loading=\"lazy\"></a><figcaption>" << html_escape(p.caption)
          << "</figcaption></figure>\n";
        linked = true;
      } else {
        o << "<figure><img alt=\"" << alt << "\" src=\"data:image/png;base64,"
          << base64_encode(p.png) << "\"><figcaption>" << html_escape(p.caption)
          << "</figcaption></figure>\n";
      }
    }
    o << "</div>\n";
  }
  if (linked) {
    o << "<p class=\"muted\">The pictures are PNG files in the <code>pictures/</code> folder "
         "beside this report (one folder per encoding), linked rather than inlined: keep the "
         "folder with the report.</p>\n";
  }
}

void html_key_values(std::ostream& o, const std::string& id, const std::string& title,
                     const std::vector<std::pair<std::string, std::string>>& pairs) {
  o << "<h2>" << title << "</h2>\n<table id=\"" << id << "\">\n<tbody>\n";
  for (const auto& [k, v] : pairs) {
    o << "<tr><td>" << html_escape(k) << "</td><td><code>" << html_escape(v)
      << "</code></td></tr>\n";
  }
  o << "</tbody>\n</table>\n";
}

}  // namespace

std::string report_html(const CompareResults& r) {
  const std::vector<SummaryRow> rows = summarize(r);
  std::ostringstream o;
  html_head(o, r);
  html_summary(o, r, rows);
  html_primary(o, r);
  html_success(o, r);
  html_paired(o, r);
  html_cost(o, r, rows);
  html_charts(o, r, rows);
  html_attention(o, r, rows);
  html_pictures(o, r);
  html_key_values(o, "settings", "Settings", r.settings);
  html_key_values(o, "versions", "Versions", r.versions);
  o << "</body>\n</html>\n";
  return o.str();
}

}  // namespace vitpe
