#!/usr/bin/env bash
# Speculative decoding benchmark: llmserve-run --bench with and without n-gram speculation on the
# random `small` model (and, when llama.cpp is given, llama.cpp's prompt lookup on the same model
# converted to GGUF); with --draft, draft-model speculation too (and llama.cpp's llama-speculative
# with each --llama-draft-gguf).
#
#   scripts/bench/speculative.sh --llmserve-bin build/bin --work /tmp/spec \
#       [--model models/small] [--rounds 3] [--threads 1] [--k 3] [--llama-bin DIR --gguf FILE]
#       [--draft DIR [--llama-draft-gguf FILE]...]
#
# A draft model of random weights agrees with a random target by chance only, so the draft-model
# runs want a pair written for it by llmserve-make-model: the target with its layers from 2 on
# damped (--damp_layers_from 2 --layer_damping 0.01, so it nearly computes what its first 2 layers
# do) and the draft its first 2 layers (--num_layers 2, same seed). Draft runs: `draft` (the draft
# in the target's dtype) and `draft-int8` (--speculative-model-quantization int8), at batch 8
# with no batch limit.
#
# Each round runs, alternating, for batch 1 and 8 (all requests at once, 128 prompt tokens of
# random ids, 96 output tokens, EOS ignored):
#   - greedy: random weights fall into loops, so the output repeats itself (the case prompt lookup
#     is for: output that quotes text already seen);
#   - sampled at temperature 1 (request i seeded i + 1, so every configuration generates the same
#     tokens): the output does not repeat, drafts are rare (the cost of having speculation on);
# each with --speculative-method=none, and ngram with K (3) draft tokens (at batch 8 both with
# --speculative-disable-batch-size=4, which turns it off there, and with 0, which does not).
# Odd rounds run the configurations in one order, even rounds in the reverse order. With
# --llama-bin, llama.cpp's llama-lookup (--draft K, greedy), llama-speculative (--draft-max K,
# greedy) with each --llama-draft-gguf, and llama-bench's plain decode (-n 96 -p 0) on --gguf, one
# thread.
#
# Output: one JSON line per run on stdout and in WORK/results.jsonl, then a table of medians.
set -euo pipefail

LLMSERVE_BIN=""
WORK=""
MODEL="models/small"
ROUNDS=3
THREADS=1
K=3
LLAMA_BIN=""
GGUF=""
DRAFT=""
LLAMA_DRAFT_GGUFS=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        --llmserve-bin) LLMSERVE_BIN="$2"; shift 2 ;;
        --work) WORK="$2"; shift 2 ;;
        --model) MODEL="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --k) K="$2"; shift 2 ;;
        --llama-bin) LLAMA_BIN="$2"; shift 2 ;;
        --gguf) GGUF="$2"; shift 2 ;;
        --draft) DRAFT="$2"; shift 2 ;;
        --llama-draft-gguf) LLAMA_DRAFT_GGUFS+=("$2"); shift 2 ;;
        -h|--help) sed -n '2,30p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "speculative.sh: unknown argument $1" >&2; exit 2 ;;
    esac
done
if [[ -z "$LLMSERVE_BIN" || -z "$WORK" ]]; then
    echo "speculative.sh: --llmserve-bin and --work are required" >&2
    exit 2
fi
if [[ -n "$LLAMA_BIN" && ! -f "$GGUF" ]]; then
    echo "speculative.sh: --llama-bin needs --gguf FILE" >&2
    exit 2
fi
mkdir -p "$WORK/logs"
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"

emit() { echo "$1" | tee -a "$RESULTS"; }

run_llmserve() {  # round, batch, temperature, method, disable_batch_size
    local round=$1 batch=$2 temp=$3 method=$4 disable=$5
    local log="$WORK/logs/llmserve-r$round-b$batch-t$temp-$method-d$disable.json"
    local method_args=(--speculative-method "$method")
    case "$method" in
        draft) method_args=(--speculative-method draft --speculative-model "$DRAFT") ;;
        draft-int8) method_args=(--speculative-method draft --speculative-model "$DRAFT"
                                 --speculative-model-quantization int8) ;;
    esac
    if "$LLMSERVE_BIN/llmserve-run" --model "$MODEL" --dtype auto --threads "$THREADS" --bench \
        --bench-requests "$batch" --bench-prompt-len 128 --bench-output-len 96 --kv-cache-gb 0.25 \
        --bench-temperature "$temp" "${method_args[@]}" --num-speculative-tokens "$K" \
        --speculative-disable-batch-size "$disable" > "$log" 2> "$log.err"; then
        emit "$(python3 - "$log" "$round" "$batch" "$temp" "$method" "$disable" <<'EOF'
import json, sys
log, round_, batch, temp, method, disable = sys.argv[1:]
report = json.load(open(log))
spec = report.get("speculative", {})
print(json.dumps({"engine": "llmserve", "round": int(round_), "batch": int(batch),
                  "temperature": float(temp), "method": method,
                  "disable_batch_size": int(disable),
                  "output_tok_s": report["output_tokens_per_s"],
                  "tpot_p50_s": report["tpot_s"]["p50"], "steps": report["steps"],
                  "acceptance_rate": spec.get("acceptance_rate"),
                  "mean_acceptance_length": spec.get("mean_acceptance_length")}))
EOF
)"
    else
        emit "{\"engine\": \"llmserve\", \"round\": $round, \"batch\": $batch, \"method\": \"$method\", \"error\": \"see $log.err\"}"
    fi
}

run_llama() {  # round
    local round=$1
    local log="$WORK/logs/llama-lookup-r$round.log"
    if "$LLAMA_BIN/llama-lookup" -m "$GGUF" -p "the quick brown fox jumps over the lazy dog and then" \
        -n 96 --draft "$K" -t "$THREADS" --temp 0 -c 512 > "$log" 2>&1; then
        emit "$(python3 - "$log" "$round" <<'EOF'
import json, re, sys
text = open(sys.argv[1]).read()
speed = float(re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", text).group(1))
accept = float(re.search(r"accept\s+=\s+([\d.]+)%", text).group(1)) / 100
print(json.dumps({"engine": "llama.cpp", "round": int(sys.argv[2]), "batch": 1, "temperature": 0,
                  "method": "lookup", "output_tok_s": speed, "acceptance_rate": accept}))
EOF
)"
    else
        emit "{\"engine\": \"llama.cpp\", \"round\": $round, \"method\": \"lookup\", \"error\": \"see $log\"}"
    fi
    for draft_gguf in "${LLAMA_DRAFT_GGUFS[@]}"; do
        log="$WORK/logs/llama-speculative-r$round-$(basename "$draft_gguf" .gguf).log"
        if "$LLAMA_BIN/llama-speculative" -m "$GGUF" -md "$draft_gguf" \
            -p "the quick brown fox jumps over the lazy dog and then" -n 96 --draft-max "$K" \
            -t "$THREADS" --temp 0 -c 512 > "$log" 2>&1; then
            emit "$(python3 - "$log" "$round" "$(basename "$draft_gguf" .gguf)" <<'EOF'
import json, re, sys
text = open(sys.argv[1]).read()
speed = float(re.search(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s", text).group(1))
accept = float(re.search(r"accept\s+=\s+([\d.]+)%", text).group(1)) / 100
print(json.dumps({"engine": "llama.cpp", "round": int(sys.argv[2]), "batch": 1, "temperature": 0,
                  "method": "draft:" + sys.argv[3], "output_tok_s": speed,
                  "acceptance_rate": accept}))
EOF
)"
        else
            emit "{\"engine\": \"llama.cpp\", \"round\": $round, \"method\": \"speculative\", \"error\": \"see $log\"}"
        fi
    done
    log="$WORK/logs/llama-bench-r$round.log"
    if "$LLAMA_BIN/llama-bench" -m "$GGUF" -p 0 -n 96 -t "$THREADS" -r 1 -o json > "$log" 2>&1; then
        emit "$(python3 - "$log" "$round" <<'EOF'
import json, sys
text = open(sys.argv[1]).read()
runs = json.loads(text[text.index("["):])
print(json.dumps({"engine": "llama.cpp", "round": int(sys.argv[2]), "batch": 1, "temperature": 0,
                  "method": "none", "output_tok_s": runs[0]["avg_ts"]}))
EOF
)"
    else
        emit "{\"engine\": \"llama.cpp\", \"round\": $round, \"method\": \"none\", \"error\": \"see $log\"}"
    fi
}

# batch:method:disable_batch_size
CONFIGS=(1:none:4 1:ngram:4 8:none:4 8:ngram:4 8:ngram:0)
if [[ -n "$DRAFT" ]]; then CONFIGS+=(1:draft:4 1:draft-int8:4 8:draft:0 8:draft-int8:0); fi
for round in $(seq 1 "$ROUNDS"); do
    for temp in 0 1; do
        if (( round % 2 == 1 )); then
            order=("${CONFIGS[@]}")
        else
            order=()
            for (( i = ${#CONFIGS[@]} - 1; i >= 0; i-- )); do order+=("${CONFIGS[$i]}"); done
        fi
        for config in "${order[@]}"; do
            IFS=: read -r batch method disable <<< "$config"
            run_llmserve "$round" "$batch" "$temp" "$method" "$disable"
        done
    done
    if [[ -n "$LLAMA_BIN" ]]; then run_llama "$round"; fi
done

python3 - "$RESULTS" <<'EOF'
import collections, json, statistics, sys
rows = [json.loads(line) for line in open(sys.argv[1]) if line.strip()]
groups = collections.defaultdict(list)
for row in rows:
    if "error" in row:
        continue
    key = (row["engine"], row["batch"], row.get("temperature"), row["method"],
           row.get("disable_batch_size", ""))
    groups[key].append(row)
print(f"{'engine':10} {'batch':>5} {'temp':>4} {'method':16} {'disable':>7} {'tok/s':>8} "
      f"{'tpot ms':>8} {'accept':>7} {'mean len':>8}")
for key in sorted(groups, key=str):
    runs = groups[key]
    med = lambda field: statistics.median(r[field] for r in runs) if runs[0].get(field) is not None else None
    fmt = lambda v, f: format(v, f) if v is not None else "-"
    tpot = med("tpot_p50_s")
    print(f"{key[0]:10} {key[1]:>5} {key[2]!s:>4} {key[3]:16} {key[4]!s:>7} "
          f"{fmt(med('output_tok_s'), '8.2f')} {fmt(tpot * 1000 if tpot else None, '8.1f')} "
          f"{fmt(med('acceptance_rate'), '7.3f')} {fmt(med('mean_acceptance_length'), '8.2f')}")
EOF
