#!/usr/bin/env bash
# What each dtype and quantization mode costs in quality: mean KL divergence from the f32 model's
# next-token distribution, top-1 agreement with it, and perplexity, over a fixed text, for
# llmserve's modes and llama.cpp's GGUF types on the same weights (docs/engine.md, "Quality of
# each quantization mode", has the figures and what they do and do not show).
#
#   scripts/bench/quant_quality.sh --llmserve-bin build/bin --llama-bin /tmp/llama.cpp/build/bin \
#       --work /tmp/quant-quality [--ctx 128] [--small-tokens 1024] [--skip-small]
#
# Two models:
#   stories260K ($LLMSERVE_TESTDATA/models/stories260K): a real trained model. The text is
#     scripts/bench/data/stories260K-sample.txt, 8 samples of 511 tokens its f32 GGUF generated at
#     temperature 1 (llmserve-run --prompt-ids 1 --temperature 1 --seed 1..8 --max-tokens 511).
#     llmserve's modes run on stories260K-f32.gguf; the GGUF types are made from it by
#     llama-quantize and run by both engines; llama.cpp's figures come from its own
#     llama-perplexity --kl-divergence on the same text and context (the script checks that both
#     tokenized it to the same ids). No AWQ/GPTQ: its FFN width, 172, is not a multiple of 8.
#   small (llmserve-make-model --preset small, random weights, 30 layers, vocab 128256): the
#     tokens are --small-tokens ids its f32 form sampled at temperature 1 (seed 1); AWQ and GPTQ
#     checkpoints of the same weights come from llmserve-make-model --quantize, and GGUF types
#     from scripts/bench/safetensors_to_gguf.py + llama-quantize, run by llmserve only (the text
#     would not tokenize the same way in llama.cpp).
# Protocol, both engines (llama-perplexity's): chunks of --ctx tokens, the first replaced by BOS,
# positions ctx/2 .. ctx-2 of each chunk scored. KL is KL(f32 || mode) in nats; llama.cpp stores
# its base log-probabilities in 16 bits, llmserve in f32.
#
# Output: one JSON line per (model, engine, mode) on stdout, and a Markdown table on stderr.
set -euo pipefail

LLMSERVE_BIN=""
LLAMA_BIN=""
WORK=""
CTX=128
SMALL_TOKENS=1024
SKIP_SMALL=0
THREADS=2
while [[ $# -gt 0 ]]; do
  case "$1" in
    --llmserve-bin) LLMSERVE_BIN="$2"; shift 2 ;;
    --llama-bin) LLAMA_BIN="$2"; shift 2 ;;
    --work) WORK="$2"; shift 2 ;;
    --ctx) CTX="$2"; shift 2 ;;
    --small-tokens) SMALL_TOKENS="$2"; shift 2 ;;
    --skip-small) SKIP_SMALL=1; shift ;;
    --threads) THREADS="$2"; shift 2 ;;
    *) echo "quant_quality.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
if [[ -z "$LLMSERVE_BIN" || -z "$LLAMA_BIN" || -z "$WORK" ]]; then
  echo "usage: quant_quality.sh --llmserve-bin DIR --llama-bin DIR --work DIR [--ctx N]" >&2
  exit 2
fi
if [[ -z "${LLMSERVE_TESTDATA:-}" ]]; then
  echo "quant_quality.sh: LLMSERVE_TESTDATA is not set (the stories260K model is there)" >&2
  exit 2
fi
for tool in llmserve-perplexity llmserve-make-model llmserve-tokenize llmserve-run; do
  [[ -x "$LLMSERVE_BIN/$tool" ]] || { echo "quant_quality.sh: no $LLMSERVE_BIN/$tool" >&2; exit 2; }
done
for tool in llama-perplexity llama-quantize; do
  [[ -x "$LLAMA_BIN/$tool" ]] || { echo "quant_quality.sh: no $LLAMA_BIN/$tool" >&2; exit 2; }
done
if ! [[ "$CTX" =~ ^[0-9]+$ ]] || (( CTX < 8 || CTX > 512 )); then
  echo "quant_quality.sh: --ctx must be in [8, 512] (stories260K's context)" >&2
  exit 2
fi
HERE="$(cd "$(dirname "$0")" && pwd)"
STORIES="$LLMSERVE_TESTDATA/models/stories260K"
TEXT="$HERE/data/stories260K-sample.txt"
mkdir -p "$WORK"
RESULTS="$WORK/results.jsonl"
: > "$RESULTS"

# Runs llmserve-perplexity and appends its JSON line with the model and mode named.
ours() {  # ours MODEL_LABEL MODE_LABEL perplexity-args...
  local model_label="$1" mode_label="$2"
  shift 2
  local line
  line="$("$LLMSERVE_BIN/llmserve-perplexity" --threads "$THREADS" --ctx "$CTX" "$@")"
  python3 -c 'import json,sys; d=json.loads(sys.argv[3]); d.update(bench="model", engine="llmserve", model_label=sys.argv[1], mode=sys.argv[2]); print(json.dumps(d))' \
    "$model_label" "$mode_label" "$line" | tee -a "$RESULTS"
}

# Runs llama-perplexity --kl-divergence on a GGUF file and appends what it printed.
theirs() {  # theirs MODE_LABEL FILE
  local log="$WORK/llama-$1.log"
  "$LLAMA_BIN/llama-perplexity" -m "$2" -f "$TEXT" -c "$CTX" -b "$CTX" -t "$THREADS" \
    --kl-divergence --kl-divergence-base "$WORK/llama-base.kld" > "$log" 2>&1 ||
    { echo "quant_quality.sh: llama-perplexity failed on $2 (log: $log)" >&2; return 1; }
  python3 - "$1" "$log" <<'EOF' | tee -a "$RESULTS"
import json, re, sys
text = open(sys.argv[2], errors="replace").read()
def find(pattern):
    m = re.search(pattern, text)
    return float(m.group(1)) if m else None
print(json.dumps({"bench": "model", "engine": "llama.cpp", "model_label": "stories260K",
                  "mode": sys.argv[1], "ppl": find(r"Mean PPL\(Q\)\s*:\s*([0-9.]+)"),
                  "ppl_base": find(r"Mean PPL\(base\)\s*:\s*([0-9.]+)"),
                  "mean_kld": find(r"Mean\s+KLD:\s*([0-9.]+)"),
                  "top1_agreement": (lambda v: v / 100 if v is not None else None)(
                      find(r"Same top p:\s*([0-9.]+)"))}))
EOF
}

# --- stories260K -------------------------------------------------------------------------------
F32="$STORIES/gguf/stories260K-f32.gguf"
"$LLMSERVE_BIN/llmserve-make-model" --from_llama2c "$STORIES/stories260K.bin" \
  --tokenizer "$STORIES/tok512.model" --out "$WORK/stories-hf" > /dev/null
"$LLMSERVE_BIN/llmserve-tokenize" --tokenizer "$WORK/stories-hf" --text "$(cat "$TEXT")" \
  --add-special-tokens > "$WORK/stories.ids"
STORIES_KL=(--tokens "$WORK/stories.ids" --kl_base "$WORK/stories.base")
ours stories260K f32 --model "$F32" --tokens "$WORK/stories.ids" \
  --save_base "$WORK/stories.base" > /dev/null
ours stories260K "--dtype f16" --model "$F32" --dtype f16 "${STORIES_KL[@]}"
ours stories260K "--dtype bf16" --model "$F32" --dtype bf16 "${STORIES_KL[@]}"
ours stories260K "int8" --model "$F32" --quantization int8 "${STORIES_KL[@]}"
ours stories260K "int8 + head" --model "$F32" --quantization int8 --quantize_lm_head \
  "${STORIES_KL[@]}"
# Quantized activations apply to passes of at most 16 tokens (decode): the chunks go in such
# passes, with and without them, so that the pair isolates what they change.
ours stories260K "int8 + head (passes of 16)" --model "$F32" --quantization int8 \
  --quantize_lm_head --step_tokens 16 "${STORIES_KL[@]}"
ours stories260K "int8 + head + activations (passes of 16)" --model "$F32" --quantization int8 \
  --quantize_lm_head --quantized_activations --step_tokens 16 "${STORIES_KL[@]}"

"$LLAMA_BIN/llama-perplexity" -m "$F32" -f "$TEXT" -c "$CTX" -b "$CTX" -t "$THREADS" \
  --kl-divergence-base "$WORK/llama-base.kld" > "$WORK/llama-base.log" 2>&1 ||
  { echo "quant_quality.sh: llama-perplexity base run failed (log: $WORK/llama-base.log)" >&2; exit 1; }
# The same ids on both sides: the base file holds llama.cpp's tokens after a small header.
python3 - "$WORK/llama-base.kld" "$WORK/stories.ids" "$CTX" <<'EOF'
import struct, sys
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"_logits_", "not a llama.cpp KL base file"
n_ctx, n_vocab, n_chunk = struct.unpack_from("<Iii", data, 8)
theirs = list(struct.unpack_from("<%di" % (n_ctx * n_chunk), data, 20))
ours = [int(t) for t in open(sys.argv[2]).read().split()][: n_ctx * n_chunk]
if theirs != ours:
    first = next(i for i in range(min(len(theirs), len(ours))) if theirs[i] != ours[i])
    sys.exit("llama.cpp and llmserve tokenized the text differently (first at token %d)" % first)
print("tokens: llama.cpp and llmserve agree on %d ids (%d chunks of %d)" % (len(ours), n_chunk, n_ctx),
      file=sys.stderr)
EOF
# stories260K's ffn_down has 172 inputs, no multiple of 32: llama-quantize has no fallback for the
# legacy types there, so those files keep it in F16 (the K types fall back by themselves: to Q5_0,
# Q8_0 or F16 wherever 64 or 172 inputs are no multiple of 256).
for type in Q8_0 Q6_K Q5_1 Q5_0 Q4_1 Q4_0 Q5_K_M Q4_K_M; do
  override=()
  [[ "$type" == *_K* ]] || override=(--tensor-type ffn_down=f16)
  "$LLAMA_BIN/llama-quantize" "${override[@]}" "$F32" "$WORK/stories-$type.gguf" "$type" \
    > "$WORK/quantize-$type.log" 2>&1 ||
    { echo "quant_quality.sh: llama-quantize $type failed (log: $WORK/quantize-$type.log)" >&2; exit 1; }
  ours stories260K "gguf $type" --model "$WORK/stories-$type.gguf" "${STORIES_KL[@]}"
  theirs "gguf $type" "$WORK/stories-$type.gguf"
done

# --- small (random weights) -------------------------------------------------------------------
if [[ "$SKIP_SMALL" == 0 ]]; then
  S="$WORK/small"
  "$LLMSERVE_BIN/llmserve-make-model" --preset small --out "$S-f32" > /dev/null
  "$LLMSERVE_BIN/llmserve-make-model" --preset small --dtype f32 --quantize awq --out "$S-awq" > /dev/null
  "$LLMSERVE_BIN/llmserve-make-model" --preset small --dtype f32 --quantize gptq --out "$S-gptq" > /dev/null
  "$LLMSERVE_BIN/llmserve-run" --model "$S-f32" --prompt-ids 1 --temperature 1 --seed 1 \
    --max-tokens "$((SMALL_TOKENS - 1))" --ignore-eos --json 2>/dev/null |
    python3 -c 'import json,sys
for line in sys.stdin:
    d = json.loads(line)
    if "token_ids" in d: print(" ".join(map(str, [1] + d["token_ids"])))' > "$S.ids"
  SMALL_KL=(--tokens "$S.ids" --kl_base "$S.base")
  ours small f32 --model "$S-f32" --tokens "$S.ids" --save_base "$S.base" > /dev/null
  ours small "--dtype f16" --model "$S-f32" --dtype f16 "${SMALL_KL[@]}"
  ours small "--dtype bf16" --model "$S-f32" --dtype bf16 "${SMALL_KL[@]}"
  ours small "int8" --model "$S-f32" --quantization int8 "${SMALL_KL[@]}"
  ours small "int8 + head" --model "$S-f32" --quantization int8 --quantize_lm_head \
    "${SMALL_KL[@]}"
  ours small "int8 + head (passes of 16)" --model "$S-f32" --quantization int8 \
    --quantize_lm_head --step_tokens 16 "${SMALL_KL[@]}"
  ours small "int8 + head + activations (passes of 16)" --model "$S-f32" --quantization int8 \
    --quantize_lm_head --quantized_activations --step_tokens 16 "${SMALL_KL[@]}"
  ours small "awq (group 64)" --model "$S-awq" --dtype f32 "${SMALL_KL[@]}"
  ours small "gptq (group 64, sym)" --model "$S-gptq" --dtype f32 "${SMALL_KL[@]}"
  python3 "$HERE/safetensors_to_gguf.py" "$S-f32" "$S-f32.gguf" --outtype f32 > /dev/null
  for type in Q8_0 Q6_K Q5_K_M Q4_K_M Q4_0; do
    "$LLAMA_BIN/llama-quantize" "$S-f32.gguf" "$S-$type.gguf" "$type" \
      > "$WORK/quantize-small-$type.log" 2>&1 ||
      { echo "quant_quality.sh: llama-quantize $type failed (small)" >&2; exit 1; }
    ours small "gguf $type" --model "$S-$type.gguf" "${SMALL_KL[@]}"
    rm -f "$S-$type.gguf"
  done
  rm -f "$S.base"
fi

# --- the table ---------------------------------------------------------------------------------
python3 - "$RESULTS" >&2 <<'EOF'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
print("| model | mode | llmserve KL | llmserve top-1 | llmserve PPL | llama.cpp KL | llama.cpp top-1 | llama.cpp PPL |")
print("|---|---|---:|---:|---:|---:|---:|---:|")
def f(v, fmt):
    return "" if v is None else fmt % v
keys = []
for r in rows:
    k = (r["model_label"], r["mode"])
    if k not in keys: keys.append(k)
for k in keys:
    o = next((r for r in rows if (r["model_label"], r["mode"]) == k and r["engine"] == "llmserve"), {})
    t = next((r for r in rows if (r["model_label"], r["mode"]) == k and r["engine"] == "llama.cpp"), {})
    print("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
        k[0], k[1], f(o.get("mean_kld"), "%.5f"), f(o.get("top1_agreement"), "%.4f"),
        f(o.get("ppl"), "%.3f"), f(t.get("mean_kld"), "%.5f"), f(t.get("top1_agreement"), "%.4f"),
        f(t.get("ppl"), "%.3f")))
base = [r for r in rows if r.get("ppl_base")]
for label in sorted({r["model_label"] for r in base}):
    for engine in ("llmserve", "llama.cpp"):
        b = next((r["ppl_base"] for r in base if r["model_label"] == label and r["engine"] == engine), None)
        if b is not None: print("%s f32 perplexity (%s): %.3f" % (label, engine, b))
EOF
