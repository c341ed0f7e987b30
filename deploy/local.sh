#!/usr/bin/env bash
# The scale-out topology on one machine: N `sluice serve` replicas and a `sluice route` in front
# of them, on loopback. Ctrl-C stops them all.
#
#   deploy/local.sh [-n REPLICAS] [-p ROUTER_PORT] [--policy POLICY] [-- SERVE_FLAGS...]
#   e.g. deploy/local.sh -n 4 -- --model ../shared/models/stories260K.gguf --threads 1
#
# Replicas listen on ROUTER_PORT+1 .. ROUTER_PORT+N; their logs go to $TMPDIR/sluice-local/.
set -euo pipefail
n=2
port=8000
policy=cache_aware
bin=${SLUICE_BIN:-}
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    -p) port=$2; shift 2 ;;
    --policy) policy=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "local.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
if [[ -z "$bin" ]]; then
  bin="$(cd "$(dirname "$0")/.." && pwd)/build/release/src/cli/sluice"
fi
[[ -x "$bin" ]] || { echo "local.sh: no sluice binary at $bin (build it with make, or set SLUICE_BIN)" >&2; exit 1; }
logs="${TMPDIR:-/tmp}/sluice-local"
mkdir -p "$logs"
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; }
trap cleanup EXIT INT TERM
backends=()
for ((i = 1; i <= n; i++)); do
  p=$((port + i))
  "$bin" serve --port "$p" "$@" >"$logs/replica-$i.log" 2>&1 &
  pids+=($!)
  backends+=(--backend "http://127.0.0.1:$p")
done
# Each replica is ready when its /health answers.
for ((i = 1; i <= n; i++)); do
  p=$((port + i))
  for _ in $(seq 1 600); do
    if curl -sf "http://127.0.0.1:$p/health" >/dev/null 2>&1; then break; fi
    if ! kill -0 "${pids[$((i - 1))]}" 2>/dev/null; then
      echo "local.sh: replica $i exited; its log:" >&2; cat "$logs/replica-$i.log" >&2; exit 1
    fi
    sleep 0.1
  done
done
echo "local.sh: $n replicas on ports $((port + 1))..$((port + n)) (logs in $logs)"
"$bin" route --port "$port" --policy "$policy" "${backends[@]}" &
pids+=($!)
wait "${pids[-1]}"
