#!/usr/bin/env bash
# Installs what sluice needs to build and test, from Debian 12 packages only.
# Idempotent: packages already present are left alone, and apt is not touched at all
# when nothing is missing.
set -euo pipefail

packages=(
  g++ cmake ninja-build make pkg-config
  ccache              # compiler cache: CMake compiles through it when present (CMakeLists.txt)
  clang-19            # second compiler: -Wthread-safety checks the locking (make test-asan)
  libhwy-dev          # Google Highway: portable SIMD with runtime dispatch (kernels/)
  libfmt-dev          # formatting
  libcli11-dev        # command line
  nlohmann-json3-dev  # JSON (sluice generate --json, the HTTP API)
  libboost1.81-dev    # Asio/Beast: the HTTP server (sluice serve) and client (sluice bench)
  libpcre2-dev        # BPE pre-tokenizer regexes (Unicode properties)
  libyaml-cpp-dev     # eval suites and promptfoo configs (sluice eval)
  libsqlite3-dev      # the eval run store and request cache (sluice eval)
  libssl-dev openssl  # TLS for https:// endpoints (eval, bench); the openssl CLI makes test certificates
  chromium            # headless browser: renders the eval HTML report in its test
  libgtest-dev libgmock-dev libbenchmark-dev
  python3-jinja2      # oracle for chat templates (src/chat conformance test, testdata/render.py)
  python3-yaml        # reads the Kubernetes manifests in tests/deploy
  curl                # HTTP peer in the server tests
  prometheus          # promtool checks the /metrics exposition in the server tests
  libclang-rt-19-dev  # clang's runtimes: ASan and UBSan (make test-asan), libFuzzer (make fuzz)
)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# Node.js runs the real-client tests (tests/clients: the official openai npm package). A
# machine that has node and npm already (Debian's or NodeSource's) keeps them.
if ! command -v node > /dev/null || ! command -v npm > /dev/null; then
  missing+=(nodejs npm)
fi

if [ ${#missing[@]} -eq 0 ]; then
  echo "setup: all ${#packages[@]} packages present"
else
  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  export DEBIAN_FRONTEND=noninteractive
  "${sudo_cmd[@]}" apt-get update -qq
  "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# The npm packages of the client tests, at the versions package-lock.json pins.
clients="$(dirname "$0")/../tests/clients"
if [ ! -f "$clients/node_modules/openai/package.json" ] || [ "$clients/package-lock.json" -nt "$clients/node_modules" ]; then
  echo "setup: npm ci in tests/clients"
  npm ci --prefix "$clients" --no-audit --no-fund --loglevel=error
fi
