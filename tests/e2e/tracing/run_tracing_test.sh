#!/usr/bin/env bash
# OpenTelemetry's JS SDK and OTLP definitions against the real gateway and workers
# (tracing_test.mjs says what is checked).
# Usage: run_tracing_test.sh BIN_DIR WORK_DIR
# Exit 77 (skipped) when node/npm are missing or the npm registry cannot be reached.
set -uo pipefail

bin="$1"
work="$2"
here="$(cd "$(dirname "$0")" && pwd)"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are not installed" >&2
  exit 77
fi
mkdir -p "$work"
source "$here/../../testing/npm_packages.sh"
npm_packages "$here" "$work" || exit $?
# The test imports its packages from $work/node_modules.
cp "$here/tracing_test.mjs" "$work/"
node "$work/tracing_test.mjs" "$bin" "$work"
