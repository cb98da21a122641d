#!/usr/bin/env bash
# `make run`: one worker and the gateway on loopback, on the default model, in the foreground.
# Ctrl-C (or SIGTERM) drains and stops both.
set -euo pipefail

build_dir="${1:-build}"
model_dir="${LLMSERVE_MODEL:-models/tiny}"
worker_port="${LLMSERVE_WORKER_PORT:-50051}"
worker_metrics_port="${LLMSERVE_WORKER_METRICS_PORT:-9400}"
grpc_port="${LLMSERVE_GATEWAY_GRPC_PORT:-50050}"
http_port="${LLMSERVE_GATEWAY_HTTP_PORT:-8080}"
bin="$build_dir/bin"

if [ ! -f "$model_dir/config.json" ]; then
  echo "run: generating the default model in $model_dir (random weights, real tokenizer)"
  "$bin/llmserve-make-model" --preset tiny --out "$model_dir"
fi

pids=()
stop() {
  trap - INT TERM
  echo "run: stopping"
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  exit 0
}
trap stop INT TERM

"$bin/llmserve-worker" --model "$model_dir" --host 127.0.0.1 --port "$worker_port" \
  --metrics-port "$worker_metrics_port" --kv-cache-memory 256MiB &
pids+=($!)
"$bin/llmserve-gateway" --host 127.0.0.1 --grpc-port "$grpc_port" --http-port "$http_port" \
  --workers "127.0.0.1:$worker_port" &
pids+=($!)

# Ready when the gateway says a worker is ready (bounded: 120 s).
for _ in $(seq 1 240); do
  if curl -sf "http://127.0.0.1:$http_port/readyz" >/dev/null 2>&1; then break; fi
  for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then echo "run: a process exited; see above" >&2; stop; fi
  done
  sleep 0.5
done

cat <<INFO

run: the stack is up (model $model_dir: random weights, so the text is noise)
run:   OpenAI-compatible HTTP  http://127.0.0.1:$http_port/v1  (/healthz /readyz /metrics)
run:   gRPC llmserve.v1.Inference  127.0.0.1:$grpc_port
run:   worker gRPC 127.0.0.1:$worker_port, worker metrics http://127.0.0.1:$worker_metrics_port/metrics
run: try:
run:   curl http://127.0.0.1:$http_port/v1/chat/completions -H 'content-type: application/json' \\
run:     -d '{"model": "$(basename "$model_dir")", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}'
run:   $bin/llmserve-cli --target 127.0.0.1:$grpc_port --chat --prompt "Hello" --max-tokens 16
run: Ctrl-C stops both.
INFO
wait
