#!/usr/bin/env bash
# Coverage-guided fuzzing of every target in tests/fuzz (what `make fuzz` runs).
#
#   tests/fuzz/run_fuzzers.sh [BUILD_DIR] [SECONDS] [JOBS] [TARGET...]
#
# Builds the libFuzzer binaries with clang in BUILD_DIR (default build-fuzz): the whole project
# with AddressSanitizer, UndefinedBehaviorSanitizer and coverage instrumentation
# (-fsanitize=fuzzer-no-link), so that libFuzzer is guided by the parsers' code and not only by
# the fuzz target's own file. Then runs each target for SECONDS (default 60) on its corpus,
# BUILD_DIR/corpus/<name>, seeded from tests/fuzz/seeds/<name> (what the run finds is kept for
# the next run). Prints one JSON line per target and exits non-zero when a target fails to build
# or finds a crash, leak, timeout or sanitizer report; the reproducer is then in
# BUILD_DIR/artifacts/<name>/ and the log in BUILD_DIR/logs/<name>.log.
#
# FUZZ_ARGS, when set, is passed on to every libFuzzer run (e.g. "-entropic=0", which here
# about doubles executions per second on http_request_fuzz for much the same coverage).
# LLMSERVE_BUILD_LOCK, when set, names a file that the build step holds with flock(1) (for
# machines where several builds share the cores).

set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
build_dir=${1:-build-fuzz}
seconds=${2:-60}
jobs=${3:-2}
shift $(($# < 3 ? $# : 3))
cd "$repo"

if [[ $# -gt 0 ]]; then
  targets=("$@")
else
  targets=()
  for source in tests/fuzz/*_fuzz.cc; do targets+=("$(basename "$source" .cc)"); done
fi

# libFuzzer ships with clang's runtime (Debian: clang and libclang-rt-14-dev).
probe=$(mktemp -d)
trap 'rm -rf "$probe"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  >"$probe/probe.cc"
if ! clang++ -fsanitize=fuzzer,address,undefined "$probe/probe.cc" -o "$probe/probe" \
  >"$probe/log" 2>&1; then
  cat "$probe/log" >&2
  echo "fuzz: clang++ cannot build a libFuzzer binary; install clang and libclang-rt-14-dev" \
    "(scripts/install-deps.sh does)" >&2
  exit 1
fi

source "$repo/scripts/build-lock.sh"

# The whole project with ASan, UBSan and coverage instrumentation, clang; the same tree runs the
# ctest suite under the sanitizers (`make test-sanitize`, scripts/configure-sanitizer-build.sh).
locked bash scripts/configure-sanitizer-build.sh address "$build_dir"

mkdir -p "$build_dir/logs"
# One target at a time, so that one that does not build does not keep the others from running.
built=()
failed=0
for target in "${targets[@]}"; do
  if locked cmake --build "$build_dir" -j "$jobs" --target "$target" \
    >"$build_dir/logs/$target.build.log" 2>&1; then
    built+=("$target")
  else
    grep -m 5 -E 'error|FAILED' "$build_dir/logs/$target.build.log" >&2 || true
    printf '{"target": "%s", "error": "build failed", "log": "%s"}\n' \
      "$target" "$build_dir/logs/$target.build.log"
    failed=1
  fi
done

# UBSan reports are findings: stop at the first, with its stack. Leaks are findings too.
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}

final_stat() {  # final_stat NAME LOG: the value of libFuzzer's final "stat::NAME: VALUE" line
  sed -n "s/^stat::$1: *//p" "$2" | tail -n 1
}

# run_target TARGET: fuzzes one target; its JSON line goes to logs/TARGET.result, and what it found
# to logs/TARGET.finding (printed on stderr after every target ended); fails on a finding.
run_target() {
  local target=$1 name corpus artifacts log marker status executions exec_per_s new_units
  local peak_rss_mb coverage corpus_files artifact
  local result="$build_dir/logs/$target.result" finding="$build_dir/logs/$target.finding"
  rm -f "$result" "$finding"
  name=${target%_fuzz}
  corpus="$build_dir/corpus/$name"
  artifacts="$build_dir/artifacts/$name/"
  log="$build_dir/logs/$target.log"
  mkdir -p "$corpus" "$artifacts"
  local seeds=()
  [[ -d "tests/fuzz/seeds/$name" ]] && seeds+=("tests/fuzz/seeds/$name")
  # A dictionary of the format's words lets mutations insert a whole "Transfer-Encoding: " or
  # "{%" where bit flips would take long to find one.
  local dict=()
  [[ -f "tests/fuzz/dicts/$name.dict" ]] && dict=(-dict="tests/fuzz/dicts/$name.dict")
  marker="$build_dir/logs/$target.started"
  touch "$marker"
  status=0
  # -timeout: one input taking this long is a finding (every target is meant to take well under
  # a millisecond). The first directory receives what the run finds; the seeds are only read.
  "$build_dir/tests/fuzz/$target" -max_total_time="$seconds" -print_final_stats=1 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$artifacts" "${dict[@]}" ${FUZZ_ARGS:-} \
    "$corpus" "${seeds[@]}" \
    >"$log" 2>&1 ||
    status=$?
  executions=$(final_stat number_of_executed_units "$log")
  exec_per_s=$(final_stat average_exec_per_sec "$log")
  new_units=$(final_stat new_units_added "$log")
  peak_rss_mb=$(final_stat peak_rss_mb "$log")
  coverage=$({ grep -oE 'cov: [0-9]+' "$log" || true; } | tail -n 1 | cut -d' ' -f2)
  corpus_files=$(find "$corpus" -type f | wc -l)
  if [[ $status -eq 0 ]]; then
    printf '{"target": "%s", "seconds": %s, "executions": %s, "exec_per_s": %s, "coverage": %s, "new_units": %s, "corpus_files": %s, "peak_rss_mb": %s}\n' \
      "$target" "$seconds" "${executions:-0}" "${exec_per_s:-0}" "${coverage:-0}" \
      "${new_units:-0}" "$corpus_files" "${peak_rss_mb:-0}" >"$result"
    return 0
  fi
  artifact=$(find "$artifacts" -type f -newer "$marker" | head -n 1)
  printf '{"target": "%s", "error": "libFuzzer exited with %s", "executions": %s, "artifact": "%s", "log": "%s"}\n' \
    "$target" "$status" "${executions:-0}" "$artifact" "$log" >"$result"
  grep -m 1 -A 30 -E '^==[0-9]+==|runtime error|^[a-z_]+_fuzz: ' "$log" >"$finding" ||
    tail -n 30 "$log" >"$finding"
  return 1
}

# Each libFuzzer run is one process on one core: FUZZ_PARALLEL of them at a time (the number of
# cores by default) take the stage's time down by as much, each still fuzzing for SECONDS.
parallel=${FUZZ_PARALLEL:-$(nproc)}
pids=()
for target in "${built[@]}"; do
  while (($(jobs -rp | wc -l) >= parallel)); do wait -n || true; done
  run_target "$target" &
  pids+=($!)
done
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
for target in "${built[@]}"; do
  cat "$build_dir/logs/$target.result" 2>/dev/null ||
    printf '{"target": "%s", "error": "no result"}\n' "$target"
  if [[ -f "$build_dir/logs/$target.finding" ]]; then cat "$build_dir/logs/$target.finding" >&2; fi
done
exit "$failed"
