#!/usr/bin/env bash
# `make run`: starts what exists of the stack on the default model, in the foreground.
# Today that is one worker (llmserve-worker) on a generated `tiny` model; Ctrl-C drains it.
set -euo pipefail

build_dir="${1:-build}"
model_dir="${LLMSERVE_MODEL:-models/tiny}"
port="${LLMSERVE_WORKER_PORT:-50051}"
metrics_port="${LLMSERVE_WORKER_METRICS_PORT:-9400}"

if [ ! -f "$model_dir/config.json" ]; then
  echo "run: generating the default model in $model_dir (random weights, real tokenizer)"
  "$build_dir/bin/llmserve-make-model" --preset tiny --out "$model_dir"
fi

cat <<INFO
run: starting llmserve-worker on $model_dir
run:   gRPC  127.0.0.1:$port (llmserve.worker.v1.Worker, grpc.health.v1, reflection)
run:   metrics http://127.0.0.1:$metrics_port/metrics
run:   load it: $build_dir/bin/llmserve-bench --target 127.0.0.1:$port --requests 16
run: Ctrl-C (or SIGTERM) drains and stops it.
INFO
exec "$build_dir/bin/llmserve-worker" --model "$model_dir" --port "$port" \
  --metrics-port "$metrics_port" --kv-cache-memory 256MiB
