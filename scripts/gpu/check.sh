#!/usr/bin/env bash
# The first thing to run on a GPU machine (docs/cuda.md, "The GPU check"). Unpacks the bundle that
# scripts/gpu/bundle.sh made, then, each stage bounded in time and the whole within
# GPU_CHECK_BUDGET_S (default 510 s):
#
#   1. environment: GPU, driver, glibc, the CUDA libraries, every bundled binary's libraries
#   2. the CUDA test suites (label gpu) and the two that run everywhere
#   3. parity with Hugging Face transformers (f32 on the GPU) on three generated models:
#      Llama-3-8B's shape with 4 layers, the small preset (head dim 64, tied), GPT-2
#   4. end to end: llmserve-worker --backend=cuda behind llmserve-gateway, a greedy request
#   5. llmserve-bench-engine --backend cuda at batch 1/8/64: bf16, f16, int8
#   6. compute-sanitizer memcheck, racecheck and synccheck on the kernel tests
#
# Writes report.json, report.md and logs.tar.gz to $OUT (or ./gpu-check-out). Without a GPU it
# checks that the bundle loads, runs what runs everywhere, says why it stops, and exits 0.
#
#   bash scripts/gpu/check.sh [.gpu-bundle/bundle.tar.xz]
set -uo pipefail
bundle_tar="$(realpath "${1:-.gpu-bundle/bundle.tar.xz}")"
script_dir="$(cd "$(dirname "$0")" && pwd)"
out="${OUT:-$PWD/gpu-check-out}"
work="${GPU_CHECK_WORK:-/tmp/llmserve-gpu-check}"
budget="${GPU_CHECK_BUDGET_S:-510}"
start=$(date +%s)
rm -rf "$work" && mkdir -p "$work/logs" "$work/models" "$out"
stages="$work/stages.jsonl"
: >"$stages"

elapsed() { echo $(($(date +%s) - start)); }
left() { echo $((budget - $(elapsed))); }

# record NAME RC SECONDS NOTE
record() {
  python3 -c 'import json,sys; print(json.dumps({"stage": sys.argv[1], "rc": int(sys.argv[2]),
    "seconds": int(sys.argv[3]), "note": sys.argv[4]}))' "$1" "$2" "$3" "$4" >>"$stages"
  printf '%-40s rc=%-4s %4ss %s\n' "$1" "$2" "$3" "$4"
}

# stage NAME BOUND_S COMMAND...: runs COMMAND with at most min(BOUND_S, time left - 15 s), its
# output in logs/NAME.log. rc 124 means it ran out of time.
stage() {
  local name="$1" bound="$2"
  shift 2
  local t
  t=$(left)
  t=$((t - 15))
  ((t > bound)) && t=$bound
  if ((t < 10)); then
    record "$name" 125 0 "not run: the check's ${budget} s were used up"
    return 125
  fi
  local s=$(date +%s) rc
  timeout -k 5 "$t" "$@" >"$work/logs/$name.log" 2>&1
  rc=$?
  local note=""
  ((rc == 124 || rc == 137)) && note="stopped after ${t} s"
  record "$name" "$rc" $(($(date +%s) - s)) "$note"
  return $rc
}

finish() {
  python3 "$script_dir/report.py" "$work" "$out" "$(elapsed)" "$budget"
  tar -C "$work" -czf "$out/logs.tar.gz" logs stages.jsonl 2>/dev/null
  cat "$out/report.md"
  exit 0
}

# --- 1. environment ---------------------------------------------------------------------------
mkdir -p "$work/bundle"
if ! tar -C "$work/bundle" -xJf "$bundle_tar" 2>"$work/logs/unpack.log" &&
  ! python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' \
    "$bundle_tar" "$work/bundle" 2>>"$work/logs/unpack.log"; then
  record unpack 1 0 "cannot unpack $bundle_tar (run scripts/gpu/bundle.sh and carry .gpu-bundle)"
  finish
fi
b="$work/bundle"
cuda_dir=""
for d in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib /usr/local/cuda/lib \
  $(find /usr/local /opt /usr/lib -maxdepth 8 -name 'libcublasLt.so.13' -printf '%h\n' 2>/dev/null); do
  if [[ -e "$d/libcublasLt.so.13" && -e "$d/libcudart.so.13" ]]; then
    cuda_dir="$d"
    break
  fi
done
# Only our binaries see the bundled libraries (an older libstdc++ among them); python3 does not.
export LLMSERVE_LD_PATH="$b/deps${cuda_dir:+:$cuda_dir}"
export ours="$work/ours" b work
printf '#!/bin/sh\nLD_LIBRARY_PATH="%s" exec "$@"\n' "$LLMSERVE_LD_PATH" >"$ours"
chmod +x "$ours"
{
  echo "commit: $(cat "$b/COMMIT")"
  echo "glibc: $(ldd --version | head -1)"
  echo "cuda libraries: ${cuda_dir:-not found}"
  nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem \
    --format=csv 2>&1 || echo "nvidia-smi: not available"
  nvcc --version 2>&1 | tail -2 || true
  command -v compute-sanitizer || echo "compute-sanitizer: not on PATH"
  python3 -c 'import torch, transformers; print("torch", torch.__version__, "cuda",
    torch.cuda.is_available(), "transformers", transformers.__version__)' 2>&1 | tail -1
} >"$work/logs/environment.log" 2>&1
missing=$(for f in "$b"/tests/* "$b"/bin/* "$b"/lib/*.so; do
  LD_LIBRARY_PATH="$LLMSERVE_LD_PATH" ldd "$f" | grep 'not found' | sed "s|^|$(basename "$f"): |"
done)
echo "$missing" >>"$work/logs/environment.log"
if [[ -n "$missing" ]]; then
  record bundle-loads 1 0 "libraries not found: $(echo "$missing" | tr '\n' ';' | head -c 600)"
else
  record bundle-loads 0 0 "every bundled binary finds its libraries"
fi

# --- 2. tests -----------------------------------------------------------------------------------
gtest() {  # gtest NAME BOUND [ARGS...]
  local name="$1" bound="$2"
  shift 2
  stage "$name" "$bound" "$ours" "$b/tests/$name" --gtest_output="json:$work/logs/$name.json" "$@"
}
gtest cuda_weight_layout_test 60
gtest cuda_plugin_loader_test 60
# GPU_CHECK_WITHOUT_GPU=1 goes on without one: a rehearsal of the script's own logic here.
if ! nvidia-smi -L >/dev/null 2>&1 && [[ "${GPU_CHECK_WITHOUT_GPU:-0}" != 1 ]]; then
  record gpu 1 0 "no GPU here (nvidia-smi -L failed): the rest needs one; the bundle loads"
  finish
fi
gpu_name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1)
record gpu 0 0 "${gpu_name:-none (rehearsal)}"
gtest cuda_kernels_test 120
gtest cuda_quantized_kernels_test 90
gtest cuda_backend_test 150
gtest cuda_quantized_backend_test 150
gtest cuda_lora_test 60

# --- 3. parity with transformers ----------------------------------------------------------------
make_model() {  # make_model NAME ARGS...
  local name="$1"
  shift
  stage "make-model-$name" 120 "$ours" "$b/bin/llmserve-make-model" --out "$work/models/$name" "$@"
}
parity() {  # parity NAME PROMPT_LENGTHS...
  local name="$1" dir="$work/models/$1"
  shift
  [[ -f "$dir/config.json" ]] || return
  python3 - "$dir" "$@" >"$work/$name.prompts" <<'EOF'
import json, random, sys
vocab = json.load(open(sys.argv[1] + "/config.json"))["vocab_size"]
rng = random.Random(7)
for n in sys.argv[2:]:
    print(" ".join(str(rng.randrange(vocab)) for _ in range(int(n))))
EOF
  local runs=()
  local -a specs=("cpu f32 1e-5" "cuda bf16 1e-3" "cuda f16 1e-4")
  for spec in "${specs[@]}"; do
    read -r backend dtype limit <<<"$spec"
    local tag="$name-$backend-$dtype"
    if stage "dump-$tag" 120 "$ours" "$b/bin/llmserve-dump-logits" --model "$dir" \
      --backend "$backend" --dtype "$dtype" --prompts "$work/$name.prompts" \
      --out "$work/$tag.f32" --gen_len 8; then
      cp "$work/logs/dump-$tag.log" "$work/$tag.jsonl"
      runs+=(--ours "$backend-$dtype=$work/$tag.f32,$work/$tag.jsonl,$limit")
    fi
  done
  ((${#runs[@]})) || return
  stage "parity-$name" 150 python3 "$script_dir/hf_parity.py" --model "$dir" \
    --prompts "$work/$name.prompts" --gen_len 8 "${runs[@]}"
}
make_model llama3-8b-4l --preset llama3-8b --num_layers 4 --dtype bf16
parity llama3-8b-4l 7 33 100
make_model small --preset small --dtype bf16
parity small 5 64 200
make_model gpt2 --preset gpt2 --dtype f32
parity gpt2 9 50

# --- 4. end to end --------------------------------------------------------------------------------
e2e() {
  local dir="$work/models/small" log="$work/logs"
  [[ -f "$dir/config.json" ]] || return 1
  local port=$((20000 + RANDOM % 20000))
  "$ours" "$b/bin/llmserve-worker" --model "$dir" --backend "${GPU_CHECK_E2E_BACKEND:-cuda}" --dtype bf16 --host 127.0.0.1 \
    --port "$port" --metrics_port 0 --kv_cache_memory 2GiB >"$log/e2e-worker.log" 2>&1 &
  local worker=$!
  "$ours" "$b/bin/llmserve-gateway" --host 127.0.0.1 --grpc_port $((port + 1)) \
    --http_port $((port + 2)) --workers "127.0.0.1:$port" >"$log/e2e-gateway.log" 2>&1 &
  local gateway=$!
  local rc=1
  for _ in $(seq 1 60); do
    if "$ours" "$b/bin/llmserve-cli" --target "127.0.0.1:$((port + 1))" --prompt "Once upon a time" \
      --temperature 0 --max_tokens 32 --timeout_s 20 >"$log/e2e-reply.txt" 2>"$log/e2e-cli.log"; then
      rc=0
      break
    fi
    kill -0 "$worker" 2>/dev/null || break
    sleep 1
  done
  echo "reply: $(cat "$log/e2e-reply.txt")"
  echo "cli: $(tail -3 "$log/e2e-cli.log")"
  grep -iE "error|cuda|listening|serving" "$log/e2e-worker.log" | tail -5
  kill "$gateway" "$worker" 2>/dev/null
  wait "$gateway" "$worker" 2>/dev/null
  return $rc
}
export -f e2e
export GPU_CHECK_E2E_BACKEND
stage e2e-worker-cuda 90 bash -c e2e

# --- 5. engine benchmark --------------------------------------------------------------------------
bench() {  # bench NAME ARGS...
  local name="$1"
  shift
  stage "bench-$name" 90 "$ours" "$b/bin/llmserve-bench-engine" --model "$work/models/llama3-8b-4l" \
    --backend cuda --batch 1,8,64 --prompt_len 512 --gen_len 64 "$@"
}
if [[ -f "$work/models/llama3-8b-4l/config.json" ]]; then
  bench bf16 --dtype bf16
  bench f16 --dtype f16
  bench int8 --dtype bf16 --quantization int8
fi

# --- 6. compute-sanitizer ---------------------------------------------------------------------------
# racecheck takes 7 s per attention case (48 of them): every other kernel, and the attention cases
# that cover f16 and bf16, head dims 64 and 128, GQA 1/3/4, block sizes 16/32, 1 and 5 splits.
race_keep=" 0 5 10 15 21 23 26 29 35 41 47 "
race_filter="*-"
for i in $(seq 0 47); do
  [[ "$race_keep" == *" $i "* ]] || race_filter+="*PagedAttention*/$i:"
done
if command -v compute-sanitizer >/dev/null; then
  for tool in memcheck synccheck; do
    stage "sanitizer-$tool" 120 "$ours" compute-sanitizer --tool "$tool" --error-exitcode 99 \
      "$b/tests/cuda_kernels_test"
  done
  stage sanitizer-racecheck 150 "$ours" compute-sanitizer --tool racecheck --error-exitcode 99 \
    "$b/tests/cuda_kernels_test" --gtest_filter="${race_filter%:}"
  stage sanitizer-memcheck-quantized 90 "$ours" compute-sanitizer --tool memcheck \
    --error-exitcode 99 "$b/tests/cuda_quantized_kernels_test"
fi
finish
