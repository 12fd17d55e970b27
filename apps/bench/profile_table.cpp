#include "apps/bench/profile_table.h"

#include <fmt/format.h>

#include <cstdio>

namespace vitpe::app {

nlohmann::json profile_table(const OpTotals& t, int passes, double pass_ms, const std::string& pass,
                             double fma, bool print) {
  nlohmann::json j = {
      {pass + "s", passes}, {pass + "_ms", pass_ms}, {"ops", nlohmann::json::array()}};
  if (print) {
    std::printf("%6s profile of %d %ss, %.1f ms each:\n", "", passes, pass.c_str(), pass_ms);
    std::printf("%6s %-16s %8s %12s %7s %9s %7s\n", "", "op class", "calls", ("ms/" + pass).c_str(),
                "share", "GFLOP/s", "of FMA");
  }
  double ops_ms = 0;
  for (int c = 0; c < static_cast<int>(OpClass::count); ++c) {
    if (t.calls[c] == 0) continue;
    const double ms = 1e3 * t.seconds[c] / passes;
    ops_ms += ms;
    const double gflops = t.flops[c] > 0 ? t.flops[c] / t.seconds[c] / 1e9 : 0;
    nlohmann::json op = {{"class", op_class_name(static_cast<OpClass>(c))},
                         {"calls_per_" + pass, static_cast<double>(t.calls[c]) / passes},
                         {"ms_per_" + pass, ms},
                         {"share", ms / pass_ms}};
    if (gflops > 0) op["gflops_per_s"] = gflops;
    j["ops"].push_back(op);
    if (print) {
      const std::string rate = gflops > 0 ? fmt::format("{:9.1f}", gflops) : std::string(9, ' ');
      const std::string of_fma =
          gflops > 0 && fma > 0 ? fmt::format("{:6.0f}%", 100 * gflops / fma) : std::string();
      std::printf("%6s %-16s %8.1f %12.2f %6.1f%% %s %s\n", "",
                  op_class_name(static_cast<OpClass>(c)), static_cast<double>(t.calls[c]) / passes,
                  ms, 100 * ms / pass_ms, rate.c_str(), of_fma.c_str());
    }
  }
  j["between_ops_ms"] = pass_ms - ops_ms;
  if (print) {
    std::printf("%6s %-16s %8s %12.2f %6.1f%%  (the model's own code, between the ops)\n", "",
                "between ops", "", pass_ms - ops_ms, 100 * (pass_ms - ops_ms) / pass_ms);
  }
  return j;
}

}  // namespace vitpe::app
