#!/usr/bin/env bash
# Runs every test of a configured and built tree and ends with one summary line:
#   tests: N passed, N failed, N skipped
# Usage: scripts/run-tests.sh BUILD_DIR [JOBS]
# LLMSERVE_CTEST_ARGS adds ctest arguments (the sanitizer runs pass a label or exclusions);
# LLMSERVE_TEST_SUMMARY replaces the summary's first word ("tests").
# When tests fail, BUILD_DIR/failed-tests.txt holds the end of each one's output
# (scripts/failed-test-output.py; .ci/run prints it last).
set -uo pipefail
build_dir=${1:?usage: run-tests.sh BUILD_DIR [JOBS]}
jobs=${2:-$(nproc)}
summary=${LLMSERVE_TEST_SUMMARY:-tests}
read -r -a extra_args <<<"${LLMSERVE_CTEST_ARGS:-}"

if [ -z "${LLMSERVE_TESTDATA:-}" ]; then
  echo "run-tests: LLMSERVE_TESTDATA is not set: tokenizer conformance tests will skip"
fi
failures="$build_dir/failed-tests.txt"
rm -f "$failures"
log=$(mktemp)
trap 'rm -f "$log"' EXIT
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 600 "${extra_args[@]}" 2>&1 |
  tee "$log"
status=${PIPESTATUS[0]}

total=$(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of \([0-9]*\).*/\2/p' "$log" | tail -1)
failed=$(sed -n 's/.*tests passed, \([0-9]*\) tests\{0,1\} failed out of \([0-9]*\).*/\1/p' "$log" | tail -1)
skipped=$(grep -c '\*\*\*Skipped\|Not Run (Disabled)' "$log" || true)
if [ -z "$total" ]; then
  echo "run-tests: ctest printed no summary (status $status)" >&2
  exit $((status == 0 ? 1 : status))
fi
passed=$((total - failed - skipped))
if ((failed > 0)); then
  python3 "$(dirname "${BASH_SOURCE[0]}")/failed-test-output.py" "$build_dir" >"$failures"
fi
echo "${summary}: ${passed} passed, ${failed} failed, ${skipped} skipped"
exit "$status"
