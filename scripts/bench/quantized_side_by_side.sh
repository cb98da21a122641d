#!/usr/bin/env bash
# Side-by-side CPU benchmark of llmserve's unquantized and quantized decode against llama.cpp on
# the same random Llama model (the `small` preset: hidden 576, 30 layers, vocab 128256, tied
# embeddings).
#
#   scripts/bench/quantized_side_by_side.sh --llmserve-bin build/bin \
#       --llama-bin /tmp/llama.cpp/build/bin --work /tmp/sbs [--rounds 3] [--threads 1] [--batched]
#       [--only NAME,NAME...]
#
# What it does, in WORK:
#   1. builds read_bandwidth.c and measures the read bandwidth of THREADS threads (the decode
#      roofline), here and again at the start of every round (the roofline is their median);
#   2. writes the models once (kept between runs): small-f16 (llmserve-make-model --dtype f16)
#      and small-awq (--quantize awq, 4-bit, group 64); converts small-f16 to GGUF F16 with
#      safetensors_to_gguf.py and makes BF16, Q8_0 and Q4_0 of it with llama-quantize (whose
#      default rules choose the type of the tied token_embd/output matrix: see the model lines);
#   3. runs ROUNDS alternating rounds; each round runs every configuration once, each llama.cpp
#      type next to the llmserve configurations of its width (F16 then f16, ..., Q4_0 then the
#      AWQ ones), so that the two sides of a ratio see the same machine:
#        llama.cpp (llama-bench, one repetition): prefill `-p 512 -n 0`, decode `-p 0 -n 64 -d 128`
#          (64 tokens after a 128-token context, as llmserve's decode run) for F16, Q8_0, Q4_0;
#          a llama-bench without `-d` (before llama.cpp added it, e.g. c392e50) decodes with
#          llama-batched-bench `-npp 128 -ntg 64 -npl 1` instead, the same measurement;
#          for F16, BF16, Q8_0 and Q4_0;
#        llmserve (llmserve-bench-engine): decode `--batch 1 --prompt-len 128 --gen-len 64`,
#          prefill `--batch 1 --prompt-len 512 --gen-len 1`, for f16, bf16, int8 with the LM
#          head, AWQ (head f16) and AWQ with an int8 head, and the int8 and AWQ + int8 head ones
#          with --quantized-activations (integer dot products at batches up to 16, "+qa");
#        with --batched also batch 4, 16, 32 and 64 decode: llmserve `--batch 4,16,32,64
#          --prompt-len 128 --gen-len 32` and llama-batched-bench `-npp 128 -ntg 32
#          -npl 1,4,16,32,64`.
#   4. prints medians over the rounds; a decode median also carries roofline_fraction, its gb_s
#      over the measured read bandwidth; then (on stderr, and in WORK/table.md) a Markdown table
#      of the medians with each llmserve configuration's ratio to its llama.cpp counterpart (f16 /
#      F16, bf16 / BF16, int8+head / Q8_0, awq+int8 head / Q4_0).
# --only runs just the named configurations (llama.cpp's F16, BF16, Q8_0, Q4_0; llmserve's f16,
# bf16, int8+head, int8+head+qa, awq, awq+int8 head, awq+int8 head+qa).
#
# Output: one JSON line per measurement on stdout (and appended to WORK/results.jsonl); logs of
# every run in WORK/logs. Measurement lines carry engine, config, round, test (prefill,
# decode_bN), tok_s, and for decode weight_bytes_per_step (the weight bytes one decode step
# reads) and gb_s (steps per second × that). Bytes per step:
#   - llmserve: weight_bytes as llmserve-bench-engine reports it, less the embedding table
#     (vocab × hidden × dtype bytes) when the LM head is a separate matrix (untied, or
#     --quantize-lm-head on a tied model): the table is only indexed (docs/engine.md, "int8
#     benchmark");
#   - llama.cpp: the GGUF tensors' sizes, without token_embd when output.weight exists, with it
#     once when tied (it is then the output matrix).
# Norms are included in both (negligible). A failing run prints a line with "error" and the
# script goes on.
#
# The machine should be otherwise idle for figures worth quoting; decode at batch 1 is memory-
# bound: roofline_fraction says how close to the memory it runs.
#
# An AVX2 machine's figures on an AVX-512 one: run with LLMSERVE_CPU_ISA=avx2 in the environment
# (llmserve's lines carry cpu_isa; the table says which kernels ran) and --llama-bin pointing at
# a llama.cpp built with -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON
# -DGGML_F16C=ON (docs/engine.md, "The side-by-side run").
set -euo pipefail

usage() {
    awk 'NR > 1 && /^set -euo/ { exit } NR > 1' "$0" | sed 's/^# \{0,1\}//'
    exit "${1:-0}"
}

LLMSERVE_BIN=""
LLAMA_BIN=""
WORK=""
ROUNDS=3
THREADS=1
BATCHED=0
ONLY=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --llmserve-bin) LLMSERVE_BIN="$2"; shift 2 ;;
        --llama-bin) LLAMA_BIN="$2"; shift 2 ;;
        --work) WORK="$2"; shift 2 ;;
        --rounds) ROUNDS="$2"; shift 2 ;;
        --threads) THREADS="$2"; shift 2 ;;
        --batched) BATCHED=1; shift ;;
        --only) ONLY="$2"; shift 2 ;;
        -h|--help) usage 0 ;;
        *) echo "unknown argument: $1" >&2; usage 2 ;;
    esac
done
if [[ -z "$LLMSERVE_BIN" || -z "$LLAMA_BIN" || -z "$WORK" ]]; then
    echo "--llmserve-bin, --llama-bin and --work are required" >&2
    usage 2
fi

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
LLMSERVE_BIN="$(cd "$LLMSERVE_BIN" && pwd)"
LLAMA_BIN="$(cd "$LLAMA_BIN" && pwd)"
mkdir -p "$WORK/logs"
WORK="$(cd "$WORK" && pwd)"
LOGS="$WORK/logs"
RESULTS="$WORK/results.jsonl"
HELPER="$WORK/side_by_side_helper.py"
: > "$RESULTS"

for bin in "$LLMSERVE_BIN/llmserve-make-model" "$LLMSERVE_BIN/llmserve-bench-engine" \
           "$LLAMA_BIN/llama-bench" "$LLAMA_BIN/llama-quantize"; do
    [[ -x "$bin" ]] || { echo "missing $bin" >&2; exit 1; }
done
if [[ "$BATCHED" == 1 && ! -x "$LLAMA_BIN/llama-batched-bench" ]]; then
    echo "--batched needs $LLAMA_BIN/llama-batched-bench" >&2
    exit 1
fi
# llama-bench's -d (decode after a context of that depth) is newer than some llama.cpp builds.
LLAMA_DEPTH_FLAG=0
if "$LLAMA_BIN/llama-bench" --help 2>&1 | grep -q -- '--n-depth'; then
    LLAMA_DEPTH_FLAG=1
elif [[ ! -x "$LLAMA_BIN/llama-batched-bench" ]]; then
    echo "this llama-bench has no -d; decode after a context then needs" \
        "$LLAMA_BIN/llama-batched-bench" >&2
    exit 1
fi

# Parsing and arithmetic on the tools' JSON, in Python (standard library only).
cat > "$HELPER" <<'EOF'
"""Helpers of quantized_side_by_side.sh: GGUF sizes and the tools' output as JSON lines."""
import json
import statistics
import struct
import sys

GGML_TYPES = {0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 6: "Q5_0", 7: "Q5_1", 8: "Q8_0",
              9: "Q8_1", 10: "Q2_K", 11: "Q3_K", 12: "Q4_K", 13: "Q5_K", 14: "Q6_K",
              15: "Q8_K", 30: "BF16"}


def read_gguf_tensors(path):
    """Returns ({name: (type name, bytes)}, alignment) from a GGUF file's header."""
    with open(path, "rb") as f:
        data = f.read(64 << 20)  # The header (vocabulary included) is well under this.
    pos = 0

    def take(fmt):
        nonlocal pos
        vals = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return vals[0] if len(vals) == 1 else vals

    def take_str():
        nonlocal pos
        n = take("Q")
        s = data[pos:pos + n].decode("utf-8", "replace")
        pos += n
        return s

    scalar = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "B", 10: "Q",
              11: "q", 12: "d"}

    def take_value(vtype):
        if vtype == 8:
            return take_str()
        if vtype == 9:
            item, count = take("I"), take("Q")
            return [take_value(item) for _ in range(count)]
        return take(scalar[vtype])

    if data[:4] != b"GGUF":
        sys.exit("%s: not a GGUF file" % path)
    pos = 4
    _, n_tensors, n_kv = take("I"), take("Q"), take("Q")
    alignment = 32
    for _ in range(n_kv):
        key = take_str()
        value = take_value(take("I"))
        if key == "general.alignment":
            alignment = value
    infos = []
    for _ in range(n_tensors):
        name = take_str()
        n_dims = take("I")
        pos += 8 * n_dims
        ttype, offset = take("I"), take("Q")
        infos.append((offset, name, ttype))
    data_start = (pos + alignment - 1) // alignment * alignment
    with open(path, "rb") as f:
        f.seek(0, 2)
        file_size = f.tell()
    infos.sort()
    tensors = {}
    for i, (offset, name, ttype) in enumerate(infos):
        end = infos[i + 1][0] if i + 1 < len(infos) else file_size - data_start
        tensors[name] = (GGML_TYPES.get(ttype, str(ttype)), end - offset)
    return tensors


def gguf_info(path, config):
    tensors = read_gguf_tensors(path)
    total = sum(b for _, b in tensors.values())
    tied = "output.weight" not in tensors
    per_step = total if tied else total - tensors["token_embd.weight"][1]
    by_type = {}
    for name, (tname, nbytes) in tensors.items():
        if name.startswith("blk.") and not name.endswith("norm.weight"):
            by_type[tname] = by_type.get(tname, 0) + 1
    line = {"kind": "model", "engine": "llama.cpp", "config": config, "file": path,
            "tensor_bytes": total, "weight_bytes_per_step": per_step, "tied": tied,
            "token_embd_type": tensors["token_embd.weight"][0],
            "output_type": tensors["output.weight"][0] if not tied else "(tied: token_embd)",
            "block_matrix_types": by_type}
    print(json.dumps(line))


def measurement(engine, config, rnd, test, tok_s, threads, batch, prompt_len, gen_len,
                bytes_per_step=None, **extra):
    line = {"engine": engine, "config": config, "round": rnd, "test": test, "batch": batch,
            "prompt_len": prompt_len, "gen_len": gen_len, "threads": threads,
            "tok_s": round(tok_s, 2)}
    if bytes_per_step is not None and test.startswith("decode"):
        line["weight_bytes_per_step"] = bytes_per_step
        line["gb_s"] = round(tok_s / batch * bytes_per_step / 1e9, 2)
    line.update(extra)
    print(json.dumps(line))


def llama_bench(config, rnd, bytes_per_step):
    for raw in sys.stdin:
        raw = raw.strip()
        if not raw.startswith("{"):
            continue
        r = json.loads(raw)
        if r["n_gen"] == 0:
            test, batch = "prefill", 1
        else:
            test, batch = "decode_b1", 1
        measurement("llama.cpp", config, int(rnd), test, r["avg_ts"], r["n_threads"], batch,
                    r["n_prompt"] if r["n_gen"] == 0 else r["n_depth"], r["n_gen"],
                    int(bytes_per_step), tool="llama-bench", model_type=r["model_type"])


def batched_bench(config, rnd, bytes_per_step, threads, tool="llama-batched-bench"):
    for raw in sys.stdin:
        raw = raw.strip()
        if not raw.startswith('{"n_kv_max"'):
            continue
        r = json.loads(raw)
        measurement("llama.cpp", config, int(rnd), "decode_b%d" % r["pl"], r["speed_tg"],
                    int(threads), r["pl"], r["pp"], r["tg"], int(bytes_per_step),
                    tool=tool, prefill_tok_s=round(r["speed_pp"], 2))


def llmserve(config, rnd, model_dir, kind):
    with open(model_dir + "/config.json") as f:
        cfg = json.load(f)
    tied = bool(cfg.get("tie_word_embeddings", False))
    for raw in sys.stdin:
        raw = raw.strip()
        if not raw.startswith("{"):
            continue
        r = json.loads(raw)
        item = 4 if r["dtype"] == "f32" else 2
        embedding = cfg["vocab_size"] * cfg["hidden_size"] * item
        separate_head = not tied or r["quantize_lm_head"]
        per_step = r["weight_bytes"] - (embedding if separate_head else 0)
        if kind == "prefill":
            test, tok_s = "prefill", r["prefill_tok_s"]
        else:
            test, tok_s = "decode_b%d" % r["batch"], r["decode_tok_s"]
        measurement("llmserve", config, int(rnd), test, tok_s, r["threads"], r["batch"],
                    r["prompt_len"], r["gen_len"], per_step, tool="llmserve-bench-engine",
                    weight_bytes=r["weight_bytes"], quantization=r["quantization"],
                    cpu_isa=r.get("cpu_isa"))


def summary(path):
    groups = {}
    bandwidths = []
    for raw in open(path):
        r = json.loads(raw)
        if r.get("engine") == "read_bandwidth":
            bandwidths.append(r["best_gb_s"])
        if "tok_s" not in r:
            continue
        key = (r["engine"], r["config"], r["test"], r.get("tool", ""))
        groups.setdefault(key, []).append(r)
    # The median of the measurements (before the rounds and at the start of each).
    bandwidth = statistics.median(bandwidths) if bandwidths else None
    if bandwidth:
        print(json.dumps({"kind": "median", "engine": "read_bandwidth", "measurements":
                          len(bandwidths), "best_gb_s": bandwidth, "min": min(bandwidths),
                          "max": max(bandwidths)}))
    for (engine, config, test, tool), rows in groups.items():
        tok_s = statistics.median(r["tok_s"] for r in rows)
        line = {"kind": "median", "engine": engine, "config": config, "test": test,
                "tool": tool, "rounds": len(rows), "tok_s": round(tok_s, 2),
                "min": min(r["tok_s"] for r in rows), "max": max(r["tok_s"] for r in rows)}
        if rows[0].get("cpu_isa"):
            line["cpu_isa"] = rows[0]["cpu_isa"]
        if "weight_bytes_per_step" in rows[0]:
            per_step = rows[0]["weight_bytes_per_step"]
            line["weight_bytes_per_step"] = per_step
            line["gb_s"] = round(tok_s / rows[0]["batch"] * per_step / 1e9, 2)
            if bandwidth:
                line["roofline_fraction"] = round(line["gb_s"] / bandwidth, 3)
        print(json.dumps(line))


# llmserve configuration -> the llama.cpp one of the same width, for the table's ratios.
COUNTERPARTS = {"f16": "F16", "bf16": "BF16", "int8+head": "Q8_0", "int8+head+qa": "Q8_0",
                "awq+int8 head": "Q4_0", "awq+int8 head+qa": "Q4_0"}


def table(path):
    """A Markdown table of the medians: tok/s per test, decode b1 with its roofline fraction."""
    rows, tests, bandwidth, isas = {}, set(), None, set()
    for raw in open(path):
        r = json.loads(raw)
        if r.get("kind") != "median":
            continue
        if r.get("cpu_isa"):
            isas.add(r["cpu_isa"])
        if r["engine"] == "read_bandwidth":
            bandwidth = r
            continue
        # llama-bench's and llama-batched-bench's batch-1 decode are the same test; prefer the
        # 64-token run (the first) over --batched's 32-token one.
        rows.setdefault((r["engine"], r["config"]), {}).setdefault(r["test"], r)
        tests.add(r["test"])
    decode = sorted((t for t in tests if t.startswith("decode_b")), key=lambda t: int(t[8:]))
    columns = decode + (["prefill"] if "prefill" in tests else [])
    print("| engine | config | MB/step | " + " | ".join(
        c.replace("decode_b", "decode b") for c in columns) + " |")
    print("|---|---|---:|" + "---:|" * len(columns))
    order = sorted(rows, key=lambda k: (k[0] != "llama.cpp", k[1]))
    for engine, config in order:
        cells = rows[(engine, config)]
        mb = next((r["weight_bytes_per_step"] for r in cells.values()
                   if "weight_bytes_per_step" in r), None)
        out = [engine, config, "%.0f" % (mb / 1e6) if mb else ""]
        for c in columns:
            r = cells.get(c)
            if r is None:
                out.append("")
                continue
            text = "%.1f" % r["tok_s"]
            if c == "decode_b1" and "roofline_fraction" in r:
                text += " (%.0f%%)" % (100 * r["roofline_fraction"])
            peer = rows.get(("llama.cpp", COUNTERPARTS.get(config, "")), {}).get(c)
            if engine == "llmserve" and peer:
                text += " %.2fx" % (r["tok_s"] / peer["tok_s"])
            out.append(text)
        print("| " + " | ".join(out) + " |")
    print()
    print("decode b1: tok/s (share of the measured read bandwidth); llmserve cells: x its "
          "llama.cpp counterpart (" + ", ".join("%s / %s" % kv for kv in COUNTERPARTS.items()) +
          ")")
    if isas:
        print("llmserve CPU kernels: " + "; ".join(sorted(isas)))
    if bandwidth:
        print("read bandwidth: %.1f GB/s (median of %d measurements, %.1f-%.1f)" % (
            bandwidth["best_gb_s"], bandwidth["measurements"], bandwidth["min"], bandwidth["max"]))


if __name__ == "__main__":
    globals()[sys.argv[1].replace("-", "_")](*sys.argv[2:])
EOF

selected() {  # config name
    [[ -z "$ONLY" || ",$ONLY," == *",$1,"* ]]
}

emit() {
    tee -a "$RESULTS"
}

emit_error() {  # engine config round test log
    local fmt='{"engine": "%s", "config": "%s", "round": %s, "test": "%s", '
    fmt+='"error": "failed, see %s"}\n'
    printf "$fmt" "$1" "$2" "$3" "$4" "$5" | emit
}

# --- 1. Read bandwidth. ---
gcc -O2 -march=native -pthread -o "$WORK/read_bandwidth" "$SCRIPT_DIR/read_bandwidth.c"
"$WORK/read_bandwidth" 1024 5 "$THREADS" | emit

# --- 2. Models. ---
F16_DIR="$WORK/small-f16"
AWQ_DIR="$WORK/small-awq"
if [[ ! -f "$F16_DIR/model.safetensors" ]]; then
    "$LLMSERVE_BIN/llmserve-make-model" --preset small --dtype f16 --out "$F16_DIR" \
        > "$LOGS/make-f16.log" 2>&1
fi
if [[ ! -f "$AWQ_DIR/model.safetensors" ]]; then
    "$LLMSERVE_BIN/llmserve-make-model" --preset small --dtype f16 --quantize awq \
        --out "$AWQ_DIR" > "$LOGS/make-awq.log" 2>&1 ||
        echo "AWQ model failed: $LOGS/make-awq.log" >&2
fi
declare -A GGUF=([F16]="$WORK/small-f16.gguf" [BF16]="$WORK/small-bf16.gguf"
                 [Q8_0]="$WORK/small-q8_0.gguf" [Q4_0]="$WORK/small-q4_0.gguf")
LLAMA_CONFIGS=(F16 BF16 Q8_0 Q4_0)
if [[ ! -f "${GGUF[F16]}" || "${GGUF[F16]}" -ot "$F16_DIR/model.safetensors" ]]; then
    python3 "$SCRIPT_DIR/safetensors_to_gguf.py" "$F16_DIR" "${GGUF[F16]}" --outtype f16 \
        > "$LOGS/convert.log" 2>&1
fi
for q in BF16 Q8_0 Q4_0; do
    if [[ ! -f "${GGUF[$q]}" || "${GGUF[$q]}" -ot "${GGUF[F16]}" ]]; then
        "$LLAMA_BIN/llama-quantize" "${GGUF[F16]}" "${GGUF[$q]}" "$q" "$THREADS" \
            > "$LOGS/quantize-$q.log" 2>&1
    fi
done
declare -A LLAMA_BYTES
for c in "${LLAMA_CONFIGS[@]}"; do
    info="$(python3 "$HELPER" gguf-info "${GGUF[$c]}" "$c")"
    echo "$info" | emit
    LLAMA_BYTES[$c]="$(echo "$info" | python3 -c \
        'import json, sys; print(json.load(sys.stdin)["weight_bytes_per_step"])')"
done

# llmserve configurations: name|model dir|flags.
LLMSERVE_CONFIGS=(
    "f16|$F16_DIR|--dtype f16"
    "bf16|$F16_DIR|--dtype bf16"
    "int8+head|$F16_DIR|--dtype f16 --quantization int8 --quantize-lm-head"
    "int8+head+qa|$F16_DIR|--dtype f16 --quantization int8 --quantize-lm-head --quantized-activations"
    "awq|$AWQ_DIR|--dtype f16 --quantize-lm-head=false"
    "awq+int8 head|$AWQ_DIR|--dtype f16 --quantize-lm-head"
    "awq+int8 head+qa|$AWQ_DIR|--dtype f16 --quantize-lm-head --quantized-activations"
)

run_llama() {  # config round
    local c="$1" r="$2" log
    for t in prefill decode; do
        log="$LOGS/llama-bench-$c-$t-r$r.log"
        local args=(-p 512 -n 0)
        if [[ "$t" == decode && "$LLAMA_DEPTH_FLAG" == 0 ]]; then
            log="$LOGS/llama-batched-$c-decode-r$r.log"
            if "$LLAMA_BIN/llama-batched-bench" -m "${GGUF[$c]}" -t "$THREADS" -tb "$THREADS" \
                    -c 256 -b 512 -ub 512 -npp 128 -ntg 64 -npl 1 --output-format jsonl \
                    > "$log" 2>&1; then
                # Its own tool name: --batched's decode_b1 (32 tokens) is a separate median.
                python3 "$HELPER" batched-bench "$c" "$r" "${LLAMA_BYTES[$c]}" "$THREADS" \
                    "llama-batched-bench, no llama-bench -d" < "$log" | emit
            else
                emit_error llama.cpp "$c" "$r" "$t" "$log"
            fi
            continue
        fi
        [[ "$t" == decode ]] && args=(-p 0 -n 64 -d 128)
        if "$LLAMA_BIN/llama-bench" -m "${GGUF[$c]}" -t "$THREADS" "${args[@]}" -r 1 -o jsonl \
                > "$log" 2> "$log.err"; then
            python3 "$HELPER" llama-bench "$c" "$r" "${LLAMA_BYTES[$c]}" < "$log" | emit
        else
            emit_error llama.cpp "$c" "$r" "$t" "$log.err"
        fi
    done
    if [[ "$BATCHED" == 1 ]]; then
        log="$LOGS/llama-batched-$c-r$r.log"
        if "$LLAMA_BIN/llama-batched-bench" -m "${GGUF[$c]}" -t "$THREADS" -tb "$THREADS" \
                -c $((64 * (128 + 32))) -b 2048 -ub 512 -npp 128 -ntg 32 -npl 1,4,16,32,64 \
                --output-format jsonl > "$log" 2>&1; then
            python3 "$HELPER" batched-bench "$c" "$r" "${LLAMA_BYTES[$c]}" "$THREADS" \
                < "$log" | emit
        else
            emit_error llama.cpp "$c" "$r" batched "$log"
        fi
    fi
}

run_llmserve() {  # "name|dir|flags" round
    local name dir flags r="$2" log tag
    IFS='|' read -r name dir flags <<< "$1"
    tag="${name//[^a-z0-9]/_}"
    local -a flag_array
    read -r -a flag_array <<< "$flags"
    local -a tests=("decode|--batch 1 --prompt-len 128 --gen-len 64"
                    "prefill|--batch 1 --prompt-len 512 --gen-len 1")
    [[ "$BATCHED" == 1 ]] && tests+=("batched|--batch 4,16,32,64 --prompt-len 128 --gen-len 32")
    for test in "${tests[@]}"; do
        local kind shape
        IFS='|' read -r kind shape <<< "$test"
        local -a shape_array
        read -r -a shape_array <<< "$shape"
        log="$LOGS/llmserve-$tag-$kind-r$r.log"
        if "$LLMSERVE_BIN/llmserve-bench-engine" --model "$dir" --threads "$THREADS" \
                "${flag_array[@]}" "${shape_array[@]}" > "$log" 2> "$log.err"; then
            python3 "$HELPER" llmserve "$name" "$r" "$dir" "$kind" < "$log" | emit
        else
            emit_error llmserve "$name" "$r" "$kind" "$log.err"
        fi
    done
}

# --- 3. Alternating rounds. ---
# Each llama.cpp type runs next to the llmserve configurations of its width, so that a pair sees
# the same machine (a shared one drifts over minutes); the read bandwidth is measured again at the
# start of every round.
declare -A COUNTERPART=([f16]=F16 [bf16]=BF16 [int8+head]=Q8_0 [int8+head+qa]=Q8_0 [awq]=Q4_0
                        ["awq+int8 head"]=Q4_0 ["awq+int8 head+qa"]=Q4_0)
for ((round = 1; round <= ROUNDS; ++round)); do
    "$WORK/read_bandwidth" 1024 5 "$THREADS" | python3 -c '
import json, sys
r = json.loads(sys.stdin.read()); r["round"] = int(sys.argv[1]); print(json.dumps(r))' "$round" |
        emit
    for c in "${LLAMA_CONFIGS[@]}"; do
        if selected "$c"; then run_llama "$c" "$round"; fi
        for cfg in "${LLMSERVE_CONFIGS[@]}"; do
            name="${cfg%%|*}"
            if [[ "${COUNTERPART[$name]}" == "$c" ]] && selected "$name"; then
                run_llmserve "$cfg" "$round"
            fi
        done
    done
done

# --- 4. Medians. ---
python3 "$HELPER" summary "$RESULTS" > "$WORK/summary.jsonl"
emit < "$WORK/summary.jsonl"
python3 "$HELPER" table "$WORK/summary.jsonl" > "$WORK/table.md"
cat "$WORK/table.md" >&2
