#!/usr/bin/env bash
# What shadow traffic costs the primary path: `sluice bench` through `sluice route` at a fixed
# request rate, one row per shadow setting, and the primaries' latency (end to end p50/p99, TTFT
# p50/p99) beside the copies the router compared and dropped. Two `sluice serve` replicas on
# loopback: v1 answers clients, v2 gets the copies.
#
#   bench/shadow_bench.sh [--rate R] [-n REQUESTS] [-- SERVE_FLAGS...]
#   default: --rate 8 -n 240; SERVE_FLAGS: --model demo --threads 1
#
# Rows: no shadow; 10% and 100% copied to a live v2 (which then computes as much as v1: on a
# machine with few cores it competes with v1 for them, which is the replicas' cost, not the
# router's); 100% copied to a dead v2 (connections refused) and to a hung one (SIGSTOP: copies
# wait for their timeout, past --shadow-max-in-flight they are dropped): the router's own cost.
# Replicas restart for every row. Ports 8300 and up.
set -euo pipefail
rate=8
num=240
root="$(cd "$(dirname "$0")/.." && pwd)"
bin=${SLUICE_BIN:-$root/build/release/src/cli/sluice}
while [[ $# -gt 0 ]]; do
  case "$1" in
    --rate) rate=$2; shift 2 ;;
    -n) num=$2; shift 2 ;;
    --) shift; break ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "shadow_bench.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
serve_flags=("$@")
[[ ${#serve_flags[@]} -gt 0 ]] || serve_flags=(--model demo --threads 1)
[[ -x "$bin" ]] || { echo "shadow_bench.sh: no sluice binary at $bin (make build, or set SLUICE_BIN)" >&2; exit 1; }

work=$(mktemp -d)
pids=()
stop() { kill -CONT "${pids[@]}" 2>/dev/null || true; kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true; pids=(); }
trap 'stop; rm -rf "$work"' EXIT INT TERM
wait_health() {
  for _ in $(seq 1 600); do
    curl -sf "$1/health" > /dev/null 2>&1 && return 0
    sleep 0.1
  done
  echo "shadow_bench.sh: $1 never became healthy" >&2
  exit 1
}

echo "| shadow | e2e p50 / p99 ms | TTFT p50 / p99 ms | requests/s | copies compared | copies failed | dropped |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for row in "off:0" "live:0.1" "live:1" "dead:1" "hung:1"; do
  kind=${row%%:*}
  fraction=${row##*:}
  "$bin" serve --port 8301 "${serve_flags[@]}" > "$work/v1.log" 2>&1 &
  pids+=($!)
  "$bin" serve --port 8302 "${serve_flags[@]}" > "$work/v2.log" 2>&1 &
  v2=$!
  pids+=($v2)
  wait_health http://127.0.0.1:8301
  wait_health http://127.0.0.1:8302
  case "$kind" in
    dead) kill "$v2"; wait "$v2" 2>/dev/null || true ;;
    hung) kill -STOP "$v2" ;;
  esac
  shadow=()
  [[ "$kind" == off ]] || shadow=(--shadow v2 --shadow-fraction "$fraction" --shadow-timeout 5)
  "$bin" route --port 8300 --policy round_robin --admin-key bench-admin --health-interval 3600 \
    --backend http://127.0.0.1:8301,version=v1 --backend http://127.0.0.1:8302,version=v2 "${shadow[@]}" \
    > "$work/router.log" 2>&1 &
  pids+=($!)
  wait_health http://127.0.0.1:8300
  "$bin" bench --url http://127.0.0.1:8300 --rate "$rate" -n "$num" --prompt-tokens 64 --output-tokens 32 \
    --seed 3 --no-progress --json "$work/bench.json" > /dev/null
  sleep 1  # copies still in flight finish (or time out) before the count
  curl -s http://127.0.0.1:8300/metrics > "$work/metrics.txt"
  python3 - "$kind" "$fraction" "$work/bench.json" "$work/metrics.txt" <<'PY'
import json, re, sys
kind, fraction, bench, metrics = sys.argv[1:]
s = json.load(open(bench))["summary"]
text = open(metrics).read()
def total(name, labels=""):
    return sum(int(m[1]) for m in re.finditer(rf'^sluice_router_{name}\{{[^}}]*{labels}[^}}]*\}} (\d+)$', text, re.M))
label = "off" if kind == "off" else f"{100 * float(fraction):.0f}% to a {kind} replica"
print(f"| {label} | {s['e2e_ms']['p50']:.0f} / {s['e2e_ms']['p99']:.0f} | {s['ttft_ms']['p50']:.0f} / "
      f"{s['ttft_ms']['p99']:.0f} | {s['requests_per_s']:.2f} | "
      f"{total('shadow_pairs_total') - total('shadow_pairs_total', 'shadow_error')} | "
      f"{total('shadow_pairs_total', 'shadow_error')} | {total('shadow_dropped_total')} |")
PY
  stop
done
