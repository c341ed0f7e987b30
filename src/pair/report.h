// What `sluice pair` writes: the ranked table, the JSON report and an SVG chart (acceptance by
// draft position, predicted speedup by batch size, one line per candidate), drawn by hand.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "pair/pair.h"

namespace sluice::pair {

std::string render_table(const std::vector<Candidate>& ranked, const PairOptions& options);
// With the target's step costs ("target_step_seconds"[batch size index][k]: verifying k + 1
// tokens per sequence), from which each candidate's predicted speedup was computed.
nlohmann::json to_json(const std::vector<Candidate>& ranked, const TargetCosts& costs, const PairOptions& options,
                       const std::string& target, int64_t num_prompts);
std::string render_svg(const std::vector<Candidate>& ranked, const PairOptions& options, const std::string& target);
// The serve command line for the winner (ranked[0]), or "" when every candidate was refused or
// none predicts a speedup at the first batch size.
std::string serve_flags(const std::vector<Candidate>& ranked, const std::string& target);

}  // namespace sluice::pair
