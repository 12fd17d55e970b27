// The presentations of an encoding comparison's results (vit/compare/results.h): the terminal
// table, results.json, results.csv and report.html (inline CSS, charts as inline SVG, no
// scripts, no external requests; encoding pictures linked as the PNG files beside it that
// Picture::file names, or inlined as base64 data URIs where a picture has no file). They render
// the statistics of vit/compare/stats.h and compute none of their own.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "vit/compare/results.h"
#include "vit/compare/stats.h"

namespace vitpe {

std::string terminal_table(const CompareResults& r);
std::string results_json(const CompareResults& r);
std::string results_csv(const CompareResults& r);
std::string report_html(const CompareResults& r);
// Reads results.json back (to re-render a report, and for tests).
CompareResults parse_results_json(const std::string& text);

std::string base64_encode(const std::vector<uint8_t>& bytes);

}  // namespace vitpe
