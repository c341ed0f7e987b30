// A rollout's eval step for `sluice route` (router/rollout.h's EvalGate): the suite is run
// against a stable replica and a candidate replica with `sluice eval`'s runner, each through the
// eval store's cache (an unchanged replica is not asked again), each asked for the model it
// serves (GET /v1/models: versions may name their models apart), and the candidate's run
// compared with stable's item by item (eval/compare.h): "regressed" fails the step.
#pragma once

#include <string>

#include "router/rollout.h"

namespace sluice::cli {

// Runs keep their results in the eval store at `store_path`.
router::EvalGate make_rollout_eval_gate(std::string store_path);

}  // namespace sluice::cli
