#!/usr/bin/env bash
# Configures a sanitizer build tree; reconfigures only when its settings changed.
#
#   configure-sanitizer-build.sh address BUILD_DIR
#       clang, the whole project with AddressSanitizer, UndefinedBehaviorSanitizer and libFuzzer's
#       coverage instrumentation; the tests/fuzz targets are libFuzzer binaries. One tree serves
#       both `make test-sanitize` (the whole ctest suite) and `make fuzz` / `make fuzz-ci`.
#   configure-sanitizer-build.sh thread BUILD_DIR
#       clang, ThreadSanitizer, every executable linked with tests/tsan/absl_sync_annotations.cc
#       (`make test-tsan`).
#
# Both are RelWithDebInfo builds without CUDA, with line tables only for debug information
# (enough for symbolized stacks; it compiles faster and keeps the ccache small).
set -euo pipefail

kind=${1:?usage: configure-sanitizer-build.sh address|thread BUILD_DIR}
build_dir=${2:?usage: configure-sanitizer-build.sh address|thread BUILD_DIR}
cd "$(dirname "${BASH_SOURCE[0]}")/.."

case "$kind" in
  address)
    # The sanitizers are given here rather than through LLMSERVE_SANITIZE so that
    # -fno-sanitize=function comes after them: clang 14 cannot emit that check's prologue data
    # for coroutines ("Cannot represent a difference across sections" in gateway/http), and C++
    # code rarely calls through mistyped function pointers, which is all it catches. Boost 1.74's
    # Asio only detects co_await support on GCC; clang 14 has it, with libstdc++'s <coroutine>.
    compilers=(CC=clang CXX=clang++)
    flags="-fsanitize=fuzzer-no-link,address,undefined -fno-sanitize=function"
    flags+=" -fno-omit-frame-pointer -DBOOST_ASIO_HAS_CO_AWAIT=1"
    settings=(-DLLMSERVE_FUZZ=ON -DLLMSERVE_SANITIZE= "-DCMAKE_C_FLAGS=$flags"
              "-DCMAKE_CXX_FLAGS=$flags" -DCMAKE_EXE_LINKER_FLAGS=-fsanitize=address,undefined
              "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG"
              "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG"
              # Test code at -O0 (docs/building.md, "Build time"): it halves most test files'
              # compile time under this instrumentation.
              -DLLMSERVE_TEST_CODE_OPTIMIZATION=-O0)
    ;;
  thread)
    # clang too: its TSan instrumentation compiles about as fast as an unsanitized build.
    compilers=(CC=clang CXX=clang++)
    settings=(-DLLMSERVE_FUZZ=OFF -DLLMSERVE_SANITIZE=thread
              -DCMAKE_C_FLAGS= -DCMAKE_CXX_FLAGS=-DBOOST_ASIO_HAS_CO_AWAIT=1
              -DCMAKE_EXE_LINKER_FLAGS=
              "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG"
              "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O2 -gline-tables-only -DNDEBUG")
    ;;
  *)
    echo "configure-sanitizer-build: unknown kind '$kind' (expected address or thread)" >&2
    exit 2
    ;;
esac
settings+=(-DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMSERVE_CUDA=OFF)

# The settings as one line, kept in the tree: a change (or a tree of another kind) reconfigures
# from scratch, since CMake keeps the compiler of the first configure.
stamp="$kind ${settings[*]}"
if [[ -f "$build_dir/build.ninja" && -f "$build_dir/sanitizer-settings" ]] &&
  [[ "$(cat "$build_dir/sanitizer-settings")" == "$stamp" ]]; then
  exit 0
fi
rm -rf "$build_dir/CMakeCache.txt" "$build_dir/CMakeFiles"
env "${compilers[@]}" cmake -S . -B "$build_dir" -G Ninja "${settings[@]}" >/dev/null
echo "$stamp" >"$build_dir/sanitizer-settings"
