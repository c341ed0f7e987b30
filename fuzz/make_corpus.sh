#!/usr/bin/env bash
# Writes a small seed corpus for the GGUF fuzzer: tiny models of each architecture and type.
# Usage: make_corpus.sh SLUICE_BINARY OUT_DIR
set -euo pipefail
sluice=$1
out=$2
mkdir -p "$out"
common=(--layers 1 --dim 32 --ffn 32 --heads 2 --kv-heads 1 --vocab-size 260)
"$sluice" model make "${common[@]}" --arch llama --dtype f32 -o "$out/llama_f32.gguf" 2>/dev/null
"$sluice" model make "${common[@]}" --arch qwen2 --dtype q8_0 -o "$out/qwen2_q8_0.gguf" 2>/dev/null
"$sluice" model make "${common[@]}" --arch qwen3 --dtype bf16 -o "$out/qwen3_bf16.gguf" 2>/dev/null
