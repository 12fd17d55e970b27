// The table of an op profile (ops/op_profile.h) that `bench --model --profile` and
// `bench train --profile` print: by class of op, calls and milliseconds per pass, share of the
// pass, and for the classes that count their floating-point work (linears, attention) the rate and
// its fraction of the machine's FMA peak; then the time between the ops.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "ops/op_profile.h"

namespace vitpe::app {

// `totals` were taken over `passes` passes that took `pass_ms` each (wall time); `pass` names a
// pass in the table ("forward", "backward"); `fma` is the FMA peak in GFLOP/s (0: not measured).
// Prints the table when `print`; returns it as JSON: {<pass>s, <pass>_ms, ops: [{class,
// calls_per_<pass>, ms_per_<pass>, share[, gflops_per_s]}], between_ops_ms}.
nlohmann::json profile_table(const OpTotals& totals, int passes, double pass_ms,
                             const std::string& pass, double fma, bool print);

}  // namespace vitpe::app
