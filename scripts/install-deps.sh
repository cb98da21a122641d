#!/usr/bin/env bash
# Installs the Debian packages llmserve needs to build and test, and only those missing.
# Idempotent: a second run installs nothing. Works as root or through sudo.
#   install-deps.sh              everything: build, tests, fuzzing, formatting
#   install-deps.sh --build-only what building the binaries needs (the container images use this)
set -euo pipefail

build_packages=(
  # toolchain
  g++ cmake ninja-build ccache pkg-config make git
  # RPC and messages
  libgrpc++-dev protobuf-compiler-grpc libprotobuf-dev protobuf-compiler
  # base libraries
  libabsl-dev prometheus-cpp-dev libopenblas-dev nlohmann-json3-dev libutf8proc-dev
  libpcre2-dev libboost-dev libcpp-jwt-dev libssl-dev
  # the request log's PostgreSQL sink
  libpq-dev
  # the gateway's asynchronous DNS (--worker_dns)
  libc-ares-dev
  # gzip of exported traces
  zlib1g-dev
  # configure finds GoogleTest and Google Benchmark even when no test is built
  libgtest-dev libgmock-dev libbenchmark-dev
)
test_packages=(
  python3 python3-jinja2
  # the independent reference that embeddings are checked against
  python3-numpy
  # real peers in end-to-end tests (a Python gRPC client)
  python3-grpcio python3-grpc-tools curl openssl
  # deployment checks: docker-compose validates deploy/docker-compose.yml (no engine needed)
  docker-compose
  # monitoring: promtool and a real Prometheus server for the rules and dashboards, PyYAML to
  # read them; a real DNS server for the scaling test
  prometheus python3-yaml dnsmasq-base
  # a real Redis for the global rate limits' test
  redis-server
  # a real PostgreSQL server for the request log's test
  postgresql
  # SentencePiece's own tools, the reference our .model loader is checked against
  sentencepiece
  # llmserve-bench --plot and `make bench` draw with gnuplot
  gnuplot-nox
  # fuzzing (libFuzzer comes with clang's runtime); clang-format for `make format`; lld, which
  # configure links with when present (3 to 5 times faster than GNU ld: CI time)
  clang libclang-rt-14-dev clang-format lld
)

case "${1:-}" in
  "") packages=("${build_packages[@]}" "${test_packages[@]}") ;;
  --build-only) packages=("${build_packages[@]}") ;;
  *) echo "install-deps: unknown option '$1' (expected nothing or --build-only)" >&2; exit 2 ;;
esac

missing=()
for package in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$package")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "install-deps: all ${#packages[@]} packages are present"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
if [ "$(id -u)" -eq 0 ]; then
  as_root=()
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then
  as_root=(sudo -n)
else
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run this script as root, or give this user password-less sudo," >&2
  echo "install-deps: or install them yourself: apt-get install ${missing[*]}" >&2
  exit 1
fi

export DEBIAN_FRONTEND=noninteractive
"${as_root[@]}" apt-get update -qq
"${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}"
echo "install-deps: done"
