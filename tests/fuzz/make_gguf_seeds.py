#!/usr/bin/env python3
"""Writes the seed corpus of gguf_fuzz (tests/fuzz/seeds/gguf/): small valid GGUF files that
between them use every metadata value type (nested arrays too), both versions, a custom alignment
and every tensor type the reader supports; plus, when LLMSERVE_TESTDATA is set, the real metadata
of stories260K (made by llama.cpp) without its tensors.

    python3 tests/fuzz/make_gguf_seeds.py [OUT_DIR]
"""

import os
import random
import struct
import sys

# Value type ids (GGUF specification) and tensor type ids with (block elements, block bytes).
U8, I8, U16, I16, U32, I32, F32, BOOL, STRING, ARRAY, U64, I64, F64 = range(13)
SCALAR = {U8: "B", I8: "b", U16: "H", I16: "h", U32: "I", I32: "i", F32: "f", BOOL: "B",
          U64: "Q", I64: "q", F64: "d"}
TENSOR_TYPES = {"F32": (0, 1, 4), "F16": (1, 1, 2), "BF16": (30, 1, 2), "Q4_0": (2, 32, 18),
                "Q4_1": (3, 32, 20), "Q5_0": (6, 32, 22), "Q5_1": (7, 32, 24),
                "Q8_0": (8, 32, 34), "Q4_K": (12, 256, 144), "Q5_K": (13, 256, 176),
                "Q6_K": (14, 256, 210)}


def gguf_string(text):
    data = text.encode() if isinstance(text, str) else text
    return struct.pack("<Q", len(data)) + data


def value(type_id, v):
    if type_id == STRING:
        return gguf_string(v)
    if type_id == ARRAY:
        element_type, items = v
        return struct.pack("<IQ", element_type, len(items)) + b"".join(
            value(element_type, item) for item in items)
    return struct.pack("<" + SCALAR[type_id], v)


def gguf(pairs, tensors=(), version=3, alignment=32):
    """pairs: [(key, type, value)]; tensors: [(name, dims, type name, data bytes)]."""
    out = struct.pack("<4sIQQ", b"GGUF", version, len(tensors), len(pairs))
    for key, type_id, v in pairs:
        out += gguf_string(key) + struct.pack("<I", type_id) + value(type_id, v)
    offset, data = 0, b""
    for name, dims, type_name, raw in tensors:
        out += gguf_string(name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims)
        out += struct.pack("<IQ", TENSOR_TYPES[type_name][0], offset)
        padded = raw + b"\0" * (-len(raw) % alignment)
        data += padded
        offset += len(padded)
    if tensors:
        out += b"\0" * (-len(out) % alignment) + data
    return out


def block_bytes(type_name, rows, row_length, rng):
    """Random quants with sane f16 scales (0.01 .. 0.1) where each block starts or ends."""
    type_id, block, size = TENSOR_TYPES[type_name]
    blocks = rows * row_length // block
    if block == 1:
        return bytes(rng.getrandbits(8) for _ in range(blocks * size))
    out = b""
    for _ in range(blocks):
        raw = bytearray(rng.getrandbits(8) for _ in range(size))
        scale = struct.pack("<e", rng.uniform(0.01, 0.1))
        if type_name == "Q6_K":
            raw[208:210] = scale
        else:
            raw[0:2] = scale
            if type_name in ("Q4_1", "Q5_1", "Q4_K", "Q5_K"):
                raw[2:4] = struct.pack("<e", rng.uniform(-0.1, 0.1))
        out += bytes(raw)
    return out


def seeds():
    rng = random.Random(31)
    yield "tiny.gguf", gguf(
        [("general.architecture", STRING, "llama"), ("llama.block_count", U32, 2),
         ("llama.attention.layer_norm_rms_epsilon", F32, 1e-5)],
        [("w", [4, 2], "F32", struct.pack("<8f", *range(8)))])
    yield "all_values.gguf", gguf(
        [("u8", U8, 200), ("i8", I8, -3), ("u16", U16, 60000), ("i16", I16, -30000),
         ("u32", U32, 4294967295), ("i32", I32, -5), ("f32", F32, 0.5), ("bool", BOOL, 1),
         ("string", STRING, "text \xe2\x96\x81"), ("u64", U64, 1 << 40), ("i64", I64, -(1 << 40)),
         ("f64", F64, 0.1),
         ("tokenizer.ggml.tokens", ARRAY, (STRING, ["<unk>", "<s>", "</s>", "\u2581the"])),
         ("tokenizer.ggml.scores", ARRAY, (F32, [0.0, -1.0, -2.0, -3.5])),
         ("tokenizer.ggml.token_type", ARRAY, (I32, [2, 3, 3, 1])),
         ("bools", ARRAY, (BOOL, [0, 1, 1])),
         ("nested", ARRAY, (ARRAY, [(U8, [1, 2]), (STRING, ["x"]), (I64, [])]))])
    tensors = []
    for type_name, (_, block, _) in TENSOR_TYPES.items():
        row_length = max(block, 4)
        tensors.append((type_name.lower(), [row_length, 2], type_name,
                        block_bytes(type_name, 2, row_length, rng)))
    yield "every_type_aligned64.gguf", gguf(
        [("general.alignment", U32, 64), ("general.name", STRING, "every type")], tensors,
        alignment=64)
    yield "version2.gguf", gguf(
        [("general.architecture", STRING, "gpt2")],
        [("blk.0.attn_q.weight", [32, 1, 1, 2], "Q4_0", block_bytes("Q4_0", 2, 32, rng)),
         ("output.weight", [256, 1], "Q6_K", block_bytes("Q6_K", 1, 256, rng))], version=2)
    testdata = os.environ.get("LLMSERVE_TESTDATA")
    if testdata:
        path = os.path.join(testdata, "models/stories260K/gguf/stories260K-Q4_K_M.gguf")
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        _, _, _, pair_count = struct.unpack_from("<4sIQQ", head)
        end = skip_pairs(head, 24, pair_count)
        yield "stories260K_metadata.gguf", struct.pack("<4sIQQ", b"GGUF", 3, 0,
                                                       pair_count) + head[24:end]


def skip_pairs(data, offset, count):
    def skip_value(offset, type_id):
        if type_id == STRING:
            (length,) = struct.unpack_from("<Q", data, offset)
            return offset + 8 + length
        if type_id == ARRAY:
            element_type, n = struct.unpack_from("<IQ", data, offset)
            offset += 12
            for _ in range(n):
                offset = skip_value(offset, element_type)
            return offset
        return offset + struct.calcsize("<" + SCALAR[type_id])

    for _ in range(count):
        (length,) = struct.unpack_from("<Q", data, offset)
        offset += 8 + length
        (type_id,) = struct.unpack_from("<I", data, offset)
        offset = skip_value(offset + 4, type_id)
    return offset


def main():
    out_dir = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "seeds", "gguf")
    os.makedirs(out_dir, exist_ok=True)
    for name, data in seeds():
        with open(os.path.join(out_dir, name), "wb") as f:
            f.write(data)
        print(f"{name}: {len(data)} bytes")


if __name__ == "__main__":
    main()
