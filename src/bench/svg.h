// A self-contained SVG chart of a run, drawn by hand (no plotting library): three panels,
//   1. latency by send time: each request's TTFT and end-to-end latency, failures marked;
//   2. output throughput over time: tokens per second in time bins, from chunk arrival times;
//   3. latency CDFs of TTFT, TPOT, ITL and E2E on one log-scaled axis.
#pragma once

#include <string>

#include "bench/bench.h"

namespace sluice::bench {

std::string render_svg(const BenchReport& report);

}  // namespace sluice::bench
