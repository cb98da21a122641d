#!/usr/bin/env bash
# The official `openai` npm client against a real gateway and worker on loopback; `ajv` checks
# structured outputs and tool-call arguments against their JSON Schemas. A second gateway in front
# of the same worker parses reasoning (--reasoning_parser=deepseek_r1) for reasoning_test.mjs and
# responses_test.mjs; a second worker serves the model as embeddings for embeddings_test.mjs.
# Usage: run_openai_client_test.sh BIN_DIR WORK_DIR
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

model="$work/tiny"
# Made again when llmserve-make-model changed (its chat template, for one).
if [ ! "$model/config.json" -nt "$bin/llmserve-make-model" ]; then
  rm -rf "$model"
  "$bin/llmserve-make-model" --preset tiny --out "$model" >/dev/null
fi

pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}
trap cleanup EXIT

"$bin/llmserve-worker" --model "$model" --host 127.0.0.1 --port 0 --metrics-port -1 \
  --threads 1 --kv-cache-memory 16MiB >"$work/worker.log" 2>&1 &
pids+=($!)
worker_port=""
for _ in $(seq 1 600); do
  worker_port="$(grep -o ' on 127.0.0.1:[0-9]*' "$work/worker.log" | head -1 | grep -o '[0-9]*$')"
  [ -n "$worker_port" ] && break
  sleep 0.1
done
[ -n "$worker_port" ] || { echo "FAIL: worker did not start"; cat "$work/worker.log"; exit 1; }

# The same model served as embeddings by a second worker, as "tiny-embed".
"$bin/llmserve-worker" --model "$model" --served-model-name tiny-embed --task embed \
  --host 127.0.0.1 --port 0 --metrics-port -1 --threads 1 --kv-cache-memory 16MiB \
  >"$work/worker-embed.log" 2>&1 &
pids+=($!)
embed_port=""
for _ in $(seq 1 600); do
  embed_port="$(grep -o ' on 127.0.0.1:[0-9]*' "$work/worker-embed.log" | head -1 | grep -o '[0-9]*$')"
  [ -n "$embed_port" ] && break
  sleep 0.1
done
[ -n "$embed_port" ] || { echo "FAIL: embedding worker did not start"; cat "$work/worker-embed.log"; exit 1; }

# start_gateway LOG [FLAGS...]: starts a gateway in front of the workers; sets http_port.
start_gateway() {
  local log="$1"
  shift
  "$bin/llmserve-gateway" --host 127.0.0.1 --grpc-port 0 --http-port 0 \
    --workers "127.0.0.1:$worker_port,127.0.0.1:$embed_port" "$@" >"$log" 2>&1 &
  pids+=($!)
  http_port=""
  for _ in $(seq 1 600); do
    http_port="$(grep -o 'HTTP on http://127.0.0.1:[0-9]*' "$log" | head -1 | grep -o '[0-9]*$')"
    if [ -n "$http_port" ] && grep -q "gateway: ready" "$log"; then break; fi
    sleep 0.1
  done
  grep -q "gateway: ready" "$log" || { echo "FAIL: gateway not ready"; cat "$log"; exit 1; }
  # Ready means one worker is: wait until both models are listed.
  local models=""
  for _ in $(seq 1 600); do
    models="$(curl -s "http://127.0.0.1:$http_port/v1/models" || true)"
    if grep -q '"id":"tiny"' <<<"$models" && grep -q '"id":"tiny-embed"' <<<"$models"; then
      return
    fi
    sleep 0.1
  done
  echo "FAIL: the gateway does not list both models: $models"
  exit 1
}
start_gateway "$work/gateway-reasoning.log" --reasoning_parser=deepseek_r1
reasoning_port="$http_port"
start_gateway "$work/gateway.log"

(cd "$work" && cp "$here/openai_client_test.mjs" "$here/structured_outputs_test.mjs" \
  "$here/reasoning_test.mjs" "$here/responses_test.mjs" "$here/embeddings_test.mjs" . && \
  timeout 120 node openai_client_test.mjs "http://127.0.0.1:$http_port/v1" tiny && \
  timeout 300 node structured_outputs_test.mjs "http://127.0.0.1:$http_port/v1" tiny && \
  timeout 120 node reasoning_test.mjs "http://127.0.0.1:$reasoning_port/v1" tiny && \
  timeout 120 node responses_test.mjs "http://127.0.0.1:$http_port/v1" \
    "http://127.0.0.1:$reasoning_port/v1" tiny && \
  timeout 120 node embeddings_test.mjs "http://127.0.0.1:$http_port/v1" tiny-embed tiny)
status=$?
for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
for pid in "${pids[@]}"; do
  wait "$pid"
  code=$?
  if [ "$code" -ne 0 ]; then echo "FAIL: a server exited with $code after SIGTERM"; status=1; fi
done
pids=()
[ "$status" -eq 0 ] || { echo "--- gateway log"; tail -20 "$work/gateway.log"; }
exit "$status"
