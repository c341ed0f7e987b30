#!/usr/bin/env bash
# The project's own model-output gate (CI runs it, `make eval` runs it): `sluice serve` on
# stories260K, the evals/stories suite against the stored baseline (evals/stories/baseline.json,
# written by `sluice eval export`), failing on any item that went from pass to fail, so a kernel,
# sampling or serving change that alters the model's outputs fails with the items that changed.
# Reports land in $SLUICE_EVAL_OUT (default build/eval): JUnit, Markdown, HTML.
#
# After an intended change of the outputs, record a new baseline:
#   scripts/eval_ci.sh --update
set -euo pipefail
cd "$(dirname "$0")/.."
bin="${SLUICE_BIN:-build/release/src/cli/sluice}"
model="${SLUICE_EVAL_MODEL:-../shared/models/stories260K.gguf}"
out="${SLUICE_EVAL_OUT:-build/eval}"
mkdir -p "$out"
db="$out/eval.db"
rm -f "$db" "$db-wal" "$db-shm"
log="$out/serve.log"
"$bin" serve -m "$model" --port 0 > "$log" 2>&1 &
serve=$!
trap 'kill $serve 2>/dev/null || true; wait $serve 2>/dev/null || true' EXIT
url=""
for _ in $(seq 1 300); do
  url="$(grep -o 'listening on http://[0-9.]*:[0-9]*' "$log" | head -1 | sed 's/listening on //')" || true
  [ -n "$url" ] && break
  kill -0 $serve 2>/dev/null || { cat "$log"; echo "eval_ci: sluice serve exited" >&2; exit 3; }
  sleep 0.1
done
[ -n "$url" ] || { cat "$log"; echo "eval_ci: sluice serve did not start" >&2; exit 3; }
run=("$bin" eval --db "$db" run evals/stories/suite.yaml --base-url "$url/v1" --no-progress)
if [ "${1:-}" = "--update" ]; then
  "${run[@]}"
  "$bin" eval --db "$db" export 1 > evals/stories/baseline.json
  echo "eval_ci: evals/stories/baseline.json updated"
  exit 0
fi
"${run[@]}" --baseline evals/stories/baseline.json --fail-on flip \
  --junit "$out/junit.xml" --markdown "$out/report.md" --html "$out/report.html"
