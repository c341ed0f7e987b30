// The report of a run: its summary, a table for the terminal and a JSON document.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "bench/bench.h"

namespace sluice::bench {

// Summarizes records measured over `duration_s`. Latencies are of successful requests only;
// throughputs count successful requests and their tokens.
Summary summarize(const std::vector<RequestRecord>& records, double duration_s);

// The summary as a table for people (stdout).
std::string format_report(const BenchReport& report);

// Everything: "config", "summary" and "requests" (one record each).
nlohmann::json report_json(const BenchReport& report);

// The configuration as JSON, as `report_json` writes it.
nlohmann::json config_json(const BenchConfig& config);

}  // namespace sluice::bench
