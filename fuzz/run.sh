#!/usr/bin/env bash
# Runs libFuzzer targets of the fuzz build, each SECONDS long, from its seeds.
# Usage: run.sh SLUICE_BINARY SECONDS JOBS TARGET...   (from the repository root; `make fuzz`)
# Seeds: tiny models of each architecture and type (gguf_fuzz), fuzz/request_seeds
# (request_fuzz), the real chat templates of src/chat/testdata (chat_template_fuzz).
set -euo pipefail
sluice=$1 seconds=$2 jobs=$3
shift 3
root=$PWD/build/fuzz
status=0
for target in "$@"; do
  corpus=$root/corpus/$target crashes=$root/crashes/$target
  mkdir -p "$corpus" "$crashes"
  extra=()
  case $target in
    gguf_fuzz) bash fuzz/make_corpus.sh "$sluice" "$corpus" ;;
    request_fuzz) cp fuzz/request_seeds/* "$corpus"/; extra=(-dict="$PWD/fuzz/request.dict") ;;
    chat_template_fuzz) cp src/chat/testdata/templates/*.jinja "$corpus"/ ;;
    *) echo "fuzz: unknown target $target" >&2; exit 2 ;;
  esac
  echo "fuzz: $target for ${seconds}s ($(ls "$corpus" | wc -l) inputs in $corpus)"
  # -timeout: an input that takes over 10 s is a hang; -rss_limit_mb: over 2 GiB is a leak or
  # an unbounded allocation. Both are reported as crashes.
  # With -jobs, libFuzzer writes each job's log (fuzz-N.log) to the working directory.
  logs=$root/logs/$target
  mkdir -p "$logs"
  if ! (cd "$logs" && "$root/fuzz/$target" -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -jobs="$jobs" -workers="$jobs" -print_final_stats=1 "${extra[@]}" \
      -artifact_prefix="$crashes/" "$corpus"); then
    echo "fuzz: $target found a crash; its input is in $crashes" >&2
    status=1
  fi
done
exit $status
