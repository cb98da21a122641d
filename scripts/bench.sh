#!/usr/bin/env bash
# `make bench`: the serving benchmark on this machine. Starts two workers and a gateway on
# loopback (free ports) on the generated `small` model, runs llmserve-bench over the gateway's
# OpenAI HTTP API at a sweep of request rates, prints the table and writes bench/results.json and
# bench/sweep.png. Every process it starts is stopped on exit.
#   BENCH_MODEL    model preset (default small)          BENCH_RATES     sweep (default 0.25,0.5,1,2,inf)
#   BENCH_REQUESTS requests per rate (default 24)        BENCH_PROMPT_LEN / BENCH_OUTPUT_LEN (128 / 32)
#   BENCH_OUT      output directory (default bench)      BENCH_ARGS      more llmserve-bench flags
set -euo pipefail

build_dir="${1:-build}"
bin="$build_dir/bin"
preset="${BENCH_MODEL:-small}"
rates="${BENCH_RATES:-0.25,0.5,1,2,inf}"
requests="${BENCH_REQUESTS:-24}"
prompt_len="${BENCH_PROMPT_LEN:-128}"
output_len="${BENCH_OUTPUT_LEN:-32}"
out="${BENCH_OUT:-bench}"
model_dir="models/$preset"
mkdir -p "$out"

if [ ! -f "$model_dir/config.json" ]; then
  echo "bench: generating the $preset model in $model_dir (random weights, real tokenizer)"
  "$bin/llmserve-make-model" --preset "$preset" --out "$model_dir" >/dev/null
fi

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

pids=()
logs=$(mktemp -d)
stop() {
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$logs"
}
trap stop EXIT

workers=()
for i in 1 2; do
  port=$(free_port)
  # One kernel thread each: the two workers, the gateway and the client share this machine.
  "$bin/llmserve-worker" --model "$model_dir" --host 127.0.0.1 --port "$port" --metrics-port -1 \
    --threads 1 --kv-cache-memory 512MiB >"$logs/worker$i.log" 2>&1 &
  pids+=($!)
  workers+=("127.0.0.1:$port")
done
http_port=$(free_port)
"$bin/llmserve-gateway" --host 127.0.0.1 --grpc-port 0 --http-port "$http_port" \
  --workers "$(IFS=,; echo "${workers[*]}")" >"$logs/gateway.log" 2>&1 &
pids+=($!)

ready=0
for _ in $(seq 1 240); do
  if curl -sf "http://127.0.0.1:$http_port/readyz" >/dev/null 2>&1 &&
     [ "$(curl -sf "http://127.0.0.1:$http_port/metrics" | grep -c '^llmserve_gateway_worker_up{.*} 1')" = 2 ]; then
    ready=1
    break
  fi
  for pid in "${pids[@]}"; do
    if ! kill -0 "$pid" 2>/dev/null; then
      echo "bench: a server exited:" >&2
      tail -n 20 "$logs"/*.log >&2
      exit 1
    fi
  done
  sleep 0.5
done
if [ "$ready" != 1 ]; then
  echo "bench: the stack was not ready in 120 s" >&2
  tail -n 20 "$logs"/*.log >&2
  exit 1
fi

echo "bench: $preset model, 2 workers + gateway, $requests requests per rate of $prompt_len prompt" \
     "and $output_len output tokens, rates $rates"
# shellcheck disable=SC2086
"$bin/llmserve-bench" --api openai --target "127.0.0.1:$http_port" --tokenizer "$model_dir" \
  --request-rate "$rates" --requests "$requests" --prompt-len "$prompt_len" \
  --output-len "$output_len" --warmup 2 --slo-ttft 2s --slo-tpot 200ms --format table \
  --extra-body '{"logprobs": 0}' \
  --result-file "$out/results.json" --plot "$out/sweep.png" ${BENCH_ARGS:-}
echo "bench: wrote $out/results.json and $out/sweep.png"
