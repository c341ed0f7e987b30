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

.PHONY: all setup configure build run generate test test-asan test-tsan fuzz fuzz-request bench clean

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

# Sanitizer runs of the whole (fast) suite, as CI does.
test-asan: setup
	cmake --preset asan $(CMAKE_FLAGS) > /dev/null
	cmake --build --preset asan -j $(JOBS)
	ctest --preset asan -j $(JOBS)

test-tsan: setup
	cmake --preset tsan $(CMAKE_FLAGS) > /dev/null
	cmake --build --preset tsan -j $(JOBS)
	ctest --preset tsan -j $(JOBS)

# Coverage-guided fuzzing of the GGUF reader and loaders with AFL++, FUZZ_SECONDS long.
# Crashes land in build/fuzz/out/default/crashes.
FUZZ_SECONDS ?= 60
fuzz:
	@bash scripts/setup.sh --fuzz
	cmake --preset fuzz > /dev/null
	cmake --build --preset fuzz --target gguf_fuzz sluice
	bash fuzz/make_corpus.sh build/fuzz/src/cli/sluice build/fuzz/corpus
	AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_AUTORESUME=1 \
	  afl-fuzz -V $(FUZZ_SECONDS) -i build/fuzz/corpus -o build/fuzz/out -- build/fuzz/fuzz/gguf_fuzz @@

# The same for the server's request path (HTTP parser, JSON, request parsers).
fuzz-request:
	@bash scripts/setup.sh --fuzz
	cmake --preset fuzz > /dev/null
	cmake --build --preset fuzz --target request_fuzz
	AFL_SKIP_CPUFREQ=1 AFL_I_DONT_CARE_ABOUT_MISSING_CRASHES=1 AFL_NO_UI=1 AFL_AUTORESUME=1 \
	  afl-fuzz -V $(FUZZ_SECONDS) -i fuzz/request_seeds -o build/fuzz/out-request -- build/fuzz/fuzz/request_fuzz @@

bench: build
	$(BUILD_DIR)/bench/engine_bench $(BENCH_ARGS)

clean:
	rm -rf build
