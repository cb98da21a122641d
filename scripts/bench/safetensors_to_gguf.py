#!/usr/bin/env python3
"""Converts a Llama-family Hugging Face directory to a GGUF file that llama.cpp loads.

Pure Python (json and struct only, no numpy or torch), for the side-by-side benchmark against
llama.cpp (scripts/bench/quantized_side_by_side.sh). It reads what llmserve-make-model writes:
config.json (LlamaForCausalLM), model.safetensors or model.safetensors.index.json with F32, F16
or BF16 tensors, and a byte-level BPE tokenizer.json ("model": {"vocab", "merges"}). Quantized
(AWQ/GPTQ) checkpoints are not supported: convert the unquantized one and quantize it with
llama-quantize.

Output follows llama.cpp's convert_hf_to_gguf.py for LlamaModel:
  - GGUF version 3, alignment 32; matrices in --outtype (f16 or f32), 1-D tensors (norms) in F32;
  - q_proj and k_proj rows permuted from the HF rotary layout (rotate_half, halves of each head)
    to GGML's (interleaved pairs), as LlamaModel.permute does;
  - output.weight omitted when tie_word_embeddings is true (llama.cpp then uses token_embd);
  - the vocabulary padded to vocab_size with "[PADn]" tokens of type UNUSED.

Usage:
  safetensors_to_gguf.py MODEL_DIR OUT.gguf [--outtype f16|f32]
"""

import argparse
import json
import os
import struct
import sys

GGUF_MAGIC = b"GGUF"
GGUF_VERSION = 3
ALIGNMENT = 32

# gguf_type (ggml/include/gguf.h).
GGUF_UINT32 = 4
GGUF_INT32 = 5
GGUF_FLOAT32 = 6
GGUF_BOOL = 7
GGUF_STRING = 8
GGUF_ARRAY = 9
GGUF_UINT64 = 10

# ggml_type (ggml/include/ggml.h).
GGML_F32 = 0
GGML_F16 = 1

# llama_ftype (include/llama.h): general.file_type.
FTYPE_ALL_F32 = 0
FTYPE_MOSTLY_F16 = 1

# llama_token_type (gguf-py/gguf/constants.py TokenType).
TOKEN_NORMAL = 1
TOKEN_CONTROL = 3
TOKEN_USER_DEFINED = 4
TOKEN_UNUSED = 5

SAFETENSORS_ITEM_BYTES = {"F32": 4, "F16": 2, "BF16": 2}

# HF name suffix (after "model.layers.N.") -> GGUF name suffix (after "blk.N.").
LAYER_TENSORS = {
    "input_layernorm.weight": "attn_norm.weight",
    "self_attn.q_proj.weight": "attn_q.weight",
    "self_attn.k_proj.weight": "attn_k.weight",
    "self_attn.v_proj.weight": "attn_v.weight",
    "self_attn.o_proj.weight": "attn_output.weight",
    "post_attention_layernorm.weight": "ffn_norm.weight",
    "mlp.gate_proj.weight": "ffn_gate.weight",
    "mlp.up_proj.weight": "ffn_up.weight",
    "mlp.down_proj.weight": "ffn_down.weight",
}
GLOBAL_TENSORS = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "lm_head.weight": "output.weight",
}


class SourceTensor:
    """One tensor of a safetensors file: where its bytes are and how to convert them."""

    def __init__(self, hf_name, path, dtype, shape, begin, end):
        self.hf_name = hf_name
        self.path = path
        self.dtype = dtype
        self.shape = shape  # HF (row-major) order, e.g. [out_features, in_features].
        self.begin = begin  # Absolute file offsets of the data.
        self.end = end
        self.gguf_name = ""
        self.out_type = GGML_F32
        self.permute_heads = 0  # > 0: permute rows for rotary with this many heads.

    def numel(self):
        n = 1
        for d in self.shape:
            n *= d
        return n

    def out_nbytes(self):
        return self.numel() * (4 if self.out_type == GGML_F32 else 2)


def read_safetensors_header(path):
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    data_start = 8 + n
    tensors = []
    for name, info in header.items():
        if name == "__metadata__":
            continue
        dtype = info["dtype"]
        if dtype not in SAFETENSORS_ITEM_BYTES:
            sys.exit("%s: %s has dtype %s; only F32, F16 and BF16 are supported "
                     "(convert the unquantized checkpoint)" % (path, name, dtype))
        begin, end = info["data_offsets"]
        tensors.append(SourceTensor(name, path, dtype, list(info["shape"]),
                                    data_start + begin, data_start + end))
    return tensors


def read_all_tensors(model_dir):
    index = os.path.join(model_dir, "model.safetensors.index.json")
    if os.path.exists(index):
        with open(index) as f:
            files = sorted(set(json.load(f)["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    tensors = []
    for name in files:
        tensors.extend(read_safetensors_header(os.path.join(model_dir, name)))
    return tensors


def gguf_name_of(hf_name):
    if hf_name in GLOBAL_TENSORS:
        return GLOBAL_TENSORS[hf_name]
    prefix = "model.layers."
    if hf_name.startswith(prefix):
        layer, _, rest = hf_name[len(prefix):].partition(".")
        if rest in LAYER_TENSORS:
            return "blk.%d.%s" % (int(layer), LAYER_TENSORS[rest])
    return None


# --- Tensor data conversion (bytes in, bytes out; little-endian throughout). ---

def bf16_to_f32(data):
    out = bytearray(len(data) * 2)
    out[2::4] = data[0::2]
    out[3::4] = data[1::2]
    return bytes(out)


def convert_data(data, src_dtype, out_type):
    """Converts little-endian tensor bytes from a safetensors dtype to a GGML type."""
    if src_dtype == "BF16":
        data, src_dtype = bf16_to_f32(data), "F32"
    if out_type == GGML_F32 and src_dtype == "F32":
        return data
    if out_type == GGML_F16 and src_dtype == "F16":
        return data
    chunk = 1 << 20  # Elements per struct call: bounds the temporary tuple.
    src_fmt, src_size = ("f", 4) if src_dtype == "F32" else ("e", 2)
    dst_fmt = "f" if out_type == GGML_F32 else "e"
    n = len(data) // src_size
    parts = []
    for i in range(0, n, chunk):
        m = min(chunk, n - i)
        values = struct.unpack_from("<%d%s" % (m, src_fmt), data, i * src_size)
        parts.append(struct.pack("<%d%s" % (m, dst_fmt), *values))
    return b"".join(parts)


def permute_rows(data, rows, n_head):
    """llama.cpp's LlamaModel.permute on the rows of a [rows, cols] matrix.

    reshape(n_head, 2, head_dim / 2, cols).swapaxes(1, 2): output row h * head_dim + 2 * i + j
    is input row h * head_dim + j * head_dim / 2 + i (HF rotate_half halves -> GGML pairs).
    """
    head_dim = rows // n_head
    half = head_dim // 2
    if head_dim * n_head != rows or half * 2 != head_dim:
        sys.exit("cannot permute %d rows into %d heads" % (rows, n_head))
    row_bytes = len(data) // rows
    out = []
    for h in range(n_head):
        for i in range(half):
            for j in range(2):
                src = h * head_dim + j * half + i
                out.append(data[src * row_bytes:(src + 1) * row_bytes])
    return b"".join(out)


# --- GGUF writing. ---

def pad_to(n, alignment=ALIGNMENT):
    return (n + alignment - 1) // alignment * alignment


class GgufWriter:
    """Accumulates metadata key-values; writes header, tensor infos and data in order."""

    def __init__(self):
        self.kv = []  # (key, type, packed value bytes)

    @staticmethod
    def _string(s):
        b = s.encode("utf-8")
        return struct.pack("<Q", len(b)) + b

    def add_uint32(self, key, v):
        self.kv.append((key, GGUF_UINT32, struct.pack("<I", v)))

    def add_int32(self, key, v):
        self.kv.append((key, GGUF_INT32, struct.pack("<i", v)))

    def add_float32(self, key, v):
        self.kv.append((key, GGUF_FLOAT32, struct.pack("<f", v)))

    def add_bool(self, key, v):
        self.kv.append((key, GGUF_BOOL, struct.pack("<B", 1 if v else 0)))

    def add_string(self, key, v):
        self.kv.append((key, GGUF_STRING, self._string(v)))

    def add_string_array(self, key, values):
        body = b"".join(self._string(v) for v in values)
        head = struct.pack("<IQ", GGUF_STRING, len(values))
        self.kv.append((key, GGUF_ARRAY, head + body))

    def add_int32_array(self, key, values):
        head = struct.pack("<IQ", GGUF_INT32, len(values))
        self.kv.append((key, GGUF_ARRAY, head + struct.pack("<%di" % len(values), *values)))

    def write(self, path, tensors):
        """tensors: SourceTensor list with gguf_name, out_type and permute_heads set."""
        with open(path, "wb") as f:
            f.write(GGUF_MAGIC)
            f.write(struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(self.kv)))
            for key, vtype, value in self.kv:
                f.write(self._string(key))
                f.write(struct.pack("<I", vtype))
                f.write(value)
            offset = 0
            for t in tensors:
                f.write(self._string(t.gguf_name))
                dims = list(reversed(t.shape))  # GGML ne[0] is the innermost dimension.
                f.write(struct.pack("<I", len(dims)))
                f.write(struct.pack("<%dQ" % len(dims), *dims))
                f.write(struct.pack("<IQ", t.out_type, offset))
                offset += pad_to(t.out_nbytes())
            f.write(b"\0" * (pad_to(f.tell()) - f.tell()))
            for t in tensors:
                with open(t.path, "rb") as src:
                    src.seek(t.begin)
                    data = src.read(t.end - t.begin)
                data = convert_data(data, t.dtype, t.out_type)
                if t.permute_heads:
                    data = permute_rows(data, t.shape[0], t.permute_heads)
                if len(data) != t.out_nbytes():
                    sys.exit("%s: %d bytes, expected %d" % (t.hf_name, len(data), t.out_nbytes()))
                f.write(data)
                f.write(b"\0" * (pad_to(len(data)) - len(data)))


def add_tokenizer(writer, model_dir, config):
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        tok = json.load(f)
    model = tok["model"]
    if model.get("type", "BPE") != "BPE":
        sys.exit("tokenizer.json: only BPE tokenizers are supported")
    by_id = {i: (t, TOKEN_NORMAL) for t, i in model["vocab"].items()}
    for added in tok.get("added_tokens", []):
        kind = TOKEN_CONTROL if added.get("special") else TOKEN_USER_DEFINED
        by_id[added["id"]] = (added["content"], kind)
    vocab_size = config.get("vocab_size", max(by_id) + 1)
    if max(by_id) >= vocab_size:
        sys.exit("tokenizer has id %d >= vocab_size %d" % (max(by_id), vocab_size))
    tokens, types = [], []
    for i in range(vocab_size):
        text, kind = by_id.get(i, ("[PAD%d]" % i, TOKEN_UNUSED))
        tokens.append(text)
        types.append(kind)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges", [])]

    writer.add_string("tokenizer.ggml.model", "gpt2")
    # ByteLevel with use_regex is the GPT-2 pre-tokenizer regex.
    writer.add_string("tokenizer.ggml.pre", "gpt-2")
    writer.add_string_array("tokenizer.ggml.tokens", tokens)
    writer.add_int32_array("tokenizer.ggml.token_type", types)
    writer.add_string_array("tokenizer.ggml.merges", merges)

    def first_id(v):
        return v[0] if isinstance(v, list) else v

    if config.get("bos_token_id") is not None:
        writer.add_uint32("tokenizer.ggml.bos_token_id", first_id(config["bos_token_id"]))
    if config.get("eos_token_id") is not None:
        writer.add_uint32("tokenizer.ggml.eos_token_id", first_id(config["eos_token_id"]))
    tc_path = os.path.join(model_dir, "tokenizer_config.json")
    if os.path.exists(tc_path):
        with open(tc_path, encoding="utf-8") as f:
            tc = json.load(f)
        if "add_bos_token" in tc:
            writer.add_bool("tokenizer.ggml.add_bos_token", bool(tc["add_bos_token"]))
        if "add_eos_token" in tc:
            writer.add_bool("tokenizer.ggml.add_eos_token", bool(tc["add_eos_token"]))
        if isinstance(tc.get("chat_template"), str):
            writer.add_string("tokenizer.chat_template", tc["chat_template"])
    return vocab_size


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model_dir")
    parser.add_argument("out")
    parser.add_argument("--outtype", choices=["f16", "f32"], default="f16",
                        help="type of the matrices (norms are always f32)")
    args = parser.parse_args()

    with open(os.path.join(args.model_dir, "config.json")) as f:
        config = json.load(f)
    archs = config.get("architectures") or []
    if config.get("model_type") != "llama" and "LlamaForCausalLM" not in archs:
        sys.exit("only Llama-family models are supported (model_type %r)"
                 % config.get("model_type"))
    if config.get("quantization_config"):
        sys.exit("quantized checkpoint: convert the unquantized one and use llama-quantize")

    n_embd = config["hidden_size"]
    n_head = config["num_attention_heads"]
    n_head_kv = config.get("num_key_value_heads", n_head)
    head_dim = config.get("head_dim") or n_embd // n_head
    tied = bool(config.get("tie_word_embeddings", False))
    matrix_type = GGML_F16 if args.outtype == "f16" else GGML_F32

    tensors = []
    for t in read_all_tensors(args.model_dir):
        if t.hf_name.endswith("rotary_emb.inv_freq"):
            continue
        if t.hf_name == "lm_head.weight" and tied:
            continue
        name = gguf_name_of(t.hf_name)
        if name is None:
            sys.exit("unexpected tensor %s" % t.hf_name)
        t.gguf_name = name
        t.out_type = matrix_type if len(t.shape) >= 2 else GGML_F32
        if name.endswith("attn_q.weight"):
            t.permute_heads = n_head
        elif name.endswith("attn_k.weight"):
            t.permute_heads = n_head_kv
        tensors.append(t)

    def sort_key(t):
        if t.gguf_name.startswith("blk."):
            return (1, int(t.gguf_name.split(".")[1]), t.gguf_name)
        return (0 if t.gguf_name == "token_embd.weight" else 2, 0, t.gguf_name)

    tensors.sort(key=sort_key)
    names = {t.gguf_name for t in tensors}
    if "output.weight" not in names and not tied:
        sys.exit("no lm_head.weight and tie_word_embeddings is false")

    w = GgufWriter()
    w.add_string("general.architecture", "llama")
    w.add_string("general.name", os.path.basename(os.path.normpath(args.model_dir)))
    w.add_uint32("general.file_type",
                 FTYPE_MOSTLY_F16 if matrix_type == GGML_F16 else FTYPE_ALL_F32)
    w.add_uint32("general.quantization_version", 2)
    w.add_uint32("llama.context_length", config.get("max_position_embeddings", 2048))
    w.add_uint32("llama.embedding_length", n_embd)
    w.add_uint32("llama.block_count", config["num_hidden_layers"])
    w.add_uint32("llama.feed_forward_length", config["intermediate_size"])
    w.add_uint32("llama.attention.head_count", n_head)
    w.add_uint32("llama.attention.head_count_kv", n_head_kv)
    if head_dim != n_embd // n_head:
        w.add_uint32("llama.attention.key_length", head_dim)
        w.add_uint32("llama.attention.value_length", head_dim)
    w.add_float32("llama.rope.freq_base", float(config.get("rope_theta", 10000.0)))
    w.add_float32("llama.attention.layer_norm_rms_epsilon", float(config["rms_norm_eps"]))
    w.add_uint32("llama.rope.dimension_count", head_dim)
    scaling = config.get("rope_scaling")
    if scaling and scaling.get("rope_type", scaling.get("type")) not in (None, "default"):
        print("warning: rope_scaling %r is not written" % scaling, file=sys.stderr)
    vocab_size = add_tokenizer(w, args.model_dir, config)
    w.add_uint32("llama.vocab_size", vocab_size)

    w.write(args.out, tensors)
    total = sum(t.out_nbytes() for t in tensors)
    print("wrote %s: %d tensors, %d tensor bytes, vocab %d, tied %s"
          % (args.out, len(tensors), total, vocab_size, tied))


if __name__ == "__main__":
    main()
