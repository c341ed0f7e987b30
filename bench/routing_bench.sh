#!/usr/bin/env bash
# Routing policies side by side over real replicas: for each workload and policy, N fresh
# `sluice serve` replicas and a `sluice route` on loopback, `sluice bench` through the router,
# and one table row: the warm cache hit rate (cached / prompt tokens, from the answers' usage),
# requests/s, TTFT p50/p99, the busiest replica's share of requests, and the router's spills.
#
#   bench/routing_bench.sh [-n REPLICAS] [--policies "round_robin session cache_aware"]
#                          [--workloads "chat shared-prefix"] [-- SERVE_FLAGS...]
#   default SERVE_FLAGS: --model demo --threads 1
#
# Replicas restart for every row, so each policy starts from cold caches. Ports 8200 and up.
set -euo pipefail
n=4
policies="round_robin session cache_aware"
workloads="chat shared-prefix"
root="$(cd "$(dirname "$0")/.." && pwd)"
bin=${SLUICE_BIN:-$root/build/release/src/cli/sluice}
while [[ $# -gt 0 ]]; do
  case "$1" in
    -n) n=$2; shift 2 ;;
    --policies) policies=$2; shift 2 ;;
    --workloads) workloads=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "routing_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
serve_flags=("$@")
[[ ${#serve_flags[@]} -gt 0 ]] || serve_flags=(--model demo --threads 1)
[[ -x "$bin" ]] || { echo "routing_bench.sh: no sluice binary at $bin (make build, or set SLUICE_BIN)" >&2; exit 1; }

declare -A args
args[chat]="--workload chat --sessions 16 --turns 4 --prompt-tokens 64 --output-tokens 16 -c 8 --seed 5"
args[shared-prefix]="--workload shared-prefix --prefixes 1 --questions 64 --prefix-tokens 256 --prompt-tokens 16 --output-tokens 16 --prompt-format text -c 8 --seed 5"

work=$(mktemp -d)
pids=()
stop() { kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; pids=(); }
trap 'stop; rm -rf "$work"' EXIT INT TERM
wait_health() {
  for _ in $(seq 1 600); do
    curl -sf "$1/health" > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "routing_bench.sh: $1 never became healthy" >&2
  exit 1
}

echo "| workload | policy | cached prompt tokens | requests/s | TTFT p50 / p99 ms | busiest replica | spills |"
echo "|---|---|---:|---:|---:|---:|---:|"
for w in $workloads; do
  [[ -n "${args[$w]:-}" ]] || { echo "routing_bench.sh: unknown workload '$w'" >&2; exit 2; }
  for p in $policies; do
    backends=()
    for ((i = 1; i <= n; i++)); do
      "$bin" serve --port $((8200 + i)) "${serve_flags[@]}" > "$work/replica-$i.log" 2>&1 &
      pids+=($!)
      backends+=(--backend "http://127.0.0.1:$((8200 + i))")
    done
    for ((i = 1; i <= n; i++)); do wait_health "http://127.0.0.1:$((8200 + i))"; done
    "$bin" route --port 8200 --policy "$p" "${backends[@]}" > "$work/router.log" 2>&1 &
    pids+=($!)
    wait_health http://127.0.0.1:8200
    # shellcheck disable=SC2086
    "$bin" bench --url http://127.0.0.1:8200 ${args[$w]} --no-progress --json "$work/bench.json" > /dev/null
    curl -s http://127.0.0.1:8200/metrics > "$work/metrics.txt"
    python3 - "$w" "$p" "$work/bench.json" "$work/metrics.txt" <<'PY'
import json, re, sys
workload, policy, bench, metrics = sys.argv[1:]
s = json.load(open(bench))["summary"]
per, spills = {}, 0
for m in re.finditer(r'^sluice_router_requests_total\{backend="([^"]+)",decision="([^"]+)",status="(\d+)"\} (\d+)$',
                     open(metrics).read(), re.M):
    per[m[1]] = per.get(m[1], 0) + int(m[4])
    spills += int(m[4]) if m[2] == "spill" else 0
busiest = max(per.values()) / sum(per.values())
print(f"| {workload} | {policy} | {100 * s['cached_fraction']:.1f}% | {s['requests_per_s']:.1f} | "
      f"{s['ttft_ms']['p50']:.0f} / {s['ttft_ms']['p99']:.0f} | {100 * busiest:.0f}% | {spills} |")
PY
    stop
  done
done
