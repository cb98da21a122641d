#!/usr/bin/env bash
# `make test-tsan`: builds the concurrency-heavy tests (label tsan: the engine thread, the worker
# service, the gateway's worker pool, HTTP server and request pipeline, the thread pool and the
# concurrency limiter) with clang and ThreadSanitizer in BUILD_DIR, with the annotations that make
# Debian's uninstrumented Abseil visible to TSan (tests/tsan/absl_sync_annotations.cc), and runs
# them together with tests/tsan's proof that TSan reports real races here and no false ones.
# Ends with "tsan tests: N passed, N failed, N skipped".
#
#   scripts/run-tsan-tests.sh BUILD_DIR [JOBS]
#
# Any TSan report fails the test that printed it (TSan's exit code, 66). The suppressions in
# tests/tsan/tsan_suppressions.txt name what remains invisible to TSan in uninstrumented
# libraries, each with its reason. LLMSERVE_BUILD_LOCK, when set, names a file that the build
# holds with flock(1).
set -uo pipefail

build_dir=${1:?usage: run-tsan-tests.sh BUILD_DIR [JOBS]}
jobs=${2:-$(nproc)}
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$repo"

source "$repo/scripts/build-lock.sh"

start=$(date +%s)
locked bash scripts/configure-sanitizer-build.sh thread "$build_dir" || exit 1
if ! locked cmake --build "$build_dir" -j "$jobs" --target tsan_tests; then
  echo "test-tsan: the build failed" >&2
  exit 1
fi
echo "test-tsan: build took $(($(date +%s) - start)) s"

# second_deadlock_stack: both stacks of a lock-order inversion. history_size=4: more of each
# thread's past accesses kept, so that the other side of a race can still be shown.
export TSAN_OPTIONS="suppressions=$repo/tests/tsan/tsan_suppressions.txt:second_deadlock_stack=1:history_size=4"
# Suites of the tsan-labelled binaries that never run two threads at once: TSan reports races
# between threads, so running them here repeats what the gcc and ASan trees check, at TSan's cost
# (about a minute of the two cores). The structured-output suites below use one thread each; the
# compiler's concurrent use is CompilerTest's, which runs here.
single_threaded=(
  'JsonSchemaTest\.' 'RegexTest\.' 'GbnfTest\.' 'MatcherTest\.' 'BudgetTest\.'
  '(Tokenizers/)?TokenBytesTest\.'
)
exclude="^($(
  IFS='|'
  echo "${single_threaded[*]}"
))"
test_start=$(date +%s)
LLMSERVE_CTEST_ARGS="-L tsan -E $exclude" LLMSERVE_TEST_SUMMARY="tsan tests" \
  bash scripts/run-tests.sh "$build_dir" "$jobs"
status=$?
echo "test-tsan: the suite took $(($(date +%s) - test_start)) s"
exit "$status"
