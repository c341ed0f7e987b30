# sluice: `make run` sets up, builds and runs the main job; `make test` runs the whole suite.
# Variables: MODEL (GGUF file or "demo"), HOST, PORT (serve), PROMPT, N (generate), JOBS.

MODEL ?= demo
HOST ?= 127.0.0.1
PORT ?= 8000
PROMPT ?= Once upon a time
N ?= 64
JOBS ?= $(shell nproc)
BUILD_DIR ?= build/release
CMAKE_FLAGS ?=
ifeq ($(CI),true)
  CMAKE_FLAGS += -DSLUICE_WERROR=ON
endif

SLUICE := $(BUILD_DIR)/src/cli/sluice

.PHONY: all setup configure build run generate test eval test-asan test-tsan check-clang fuzz fuzz-request fuzz-gguf fuzz-chat soak bench clean

all: build

setup:
	@bash scripts/setup.sh

configure: setup
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) > /dev/null

build: configure
	@cmake --build $(BUILD_DIR) -j $(JOBS)

# The main job: the OpenAI-compatible server (prints how to talk to it; Ctrl-C stops it).
run: build
	$(SLUICE) serve -m "$(MODEL)" --host $(HOST) --port $(PORT)

generate: build
	$(SLUICE) generate -m "$(MODEL)" -p "$(PROMPT)" -n $(N)

test: build
	ctest --test-dir $(BUILD_DIR) --output-on-failure -j $(JOBS)

# The model-output gate: the evals/stories suite through `sluice serve` against the stored
# baseline (scripts/eval_ci.sh; reports in build/eval). `scripts/eval_ci.sh --update` records
# a new baseline after an intended change of the outputs.
eval: build
	scripts/eval_ci.sh

# Sanitizer runs, as CI does (.ci/run says why each is there). test-asan: clang-19 with
# -Wthread-safety -Werror (the SLUICE_GUARDED_BY annotations of common/mutex.h checked at compile
# time), then every test under ASan and UBSan; run it before a commit that touches locking
# (check-clang is the same run, by its older name). test-tsan: the tests that run threads
# (label `threads`) under TSan.
test-asan: setup
	@if [ -f build/asan/CMakeCache.txt ] && ! grep -q '^CMAKE_CXX_COMPILER:.*clang++-19' build/asan/CMakeCache.txt; then \
	  echo "test-asan: build/asan was configured with another compiler (g++ until 2026-12-07); configuring it afresh"; \
	  rm -rf build/asan; \
	fi
	cmake --preset asan $(CMAKE_FLAGS) -DSLUICE_WERROR=ON > /dev/null
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

check-clang: test-asan

test-tsan: setup
	cmake --preset tsan $(CMAKE_FLAGS) > /dev/null
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS)

# Coverage-guided fuzzing with libFuzzer (clang-19, ASan+UBSan): each target of FUZZ_TARGETS
# runs FUZZ_SECONDS from its seeds, on FUZZ_JOBS processes. The corpus grows in
# build/fuzz/corpus/TARGET; crashes land in build/fuzz/crashes/TARGET (rerun one with
# build/fuzz/fuzz/TARGET FILE).
FUZZ_SECONDS ?= 180
FUZZ_TARGETS ?= gguf_fuzz request_fuzz chat_template_fuzz
FUZZ_JOBS ?= 1
# The server under mixed valid, invalid, slow, disconnecting and stalled clients for
# SOAK_SECONDS (default 600): RSS flat, every KV block free, /health always answering.
SOAK_SECONDS ?= 600
soak: build
	SLUICE_BIN=$(SLUICE) SOAK_SECONDS=$(SOAK_SECONDS) node tests/soak/soak.mjs

fuzz: build
	cmake --preset fuzz > /dev/null
	cmake --build --preset fuzz -j $(JOBS)
	@bash fuzz/run.sh $(SLUICE) $(FUZZ_SECONDS) $(FUZZ_JOBS) $(FUZZ_TARGETS)

# One target at a time.
fuzz-gguf:
	@$(MAKE) --no-print-directory fuzz FUZZ_TARGETS=gguf_fuzz
fuzz-request:
	@$(MAKE) --no-print-directory fuzz FUZZ_TARGETS=request_fuzz
fuzz-chat:
	@$(MAKE) --no-print-directory fuzz FUZZ_TARGETS=chat_template_fuzz

bench: build
	$(BUILD_DIR)/bench/engine_bench $(BENCH_ARGS)

clean:
	rm -rf build
