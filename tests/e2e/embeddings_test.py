#!/usr/bin/python3
"""Embeddings (issue 35) through the real gateway and workers on loopback, checked against an
independent NumPy forward pass of the same generated model (its safetensors read here, the Llama
computation written here from the Hugging Face definition, in float64):

  1. A worker run with --task=embed on the tiny model, given sentence-transformers files
     (modules.json with a mean-pooling module and a Normalize module) and Matryoshka lengths in
     its config.json: /v1/embeddings of several token-id inputs of different lengths (one longer
     than the worker's 16-token step budget, so computed in chunks) equals the reference's mean of
     the final-norm hidden states, scaled to unit length, within 1e-4; `dimensions` cuts it before
     normalizing; base64 carries the same float32 values.
  2. A second worker on the same files with --pooling=last --normalize_embeddings=false, served
     as another model: the raw last-token hidden state.
  3. The gateway refuses a chat request to the embedding model, an embeddings request to a length
     the model was not trained for, and each worker's GetModelInfo-driven /v1/models lists both.
Prints a JSON summary of the largest differences.

Usage: embeddings_test.py GATEWAY WORKER MAKE_MODEL
Exit 0 on success, 1 on failure, 77 when NumPy is missing (skipped).
"""

import base64
import json
import os
import struct
import sys

from e2e_support import (Cluster, Worker, expect, log, post_json, run_binaries_test)

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

TOLERANCE = 1e-4
MATRYOSHKA = [16, 32, 64]


def load_safetensors(path):
    """{name: float64 array} of a safetensors file (F32, F16 or BF16 tensors)."""
    with open(path, "rb") as f:
        data = f.read()
    header_len = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + header_len])
    base = 8 + header_len
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        raw = data[base + start:base + end]
        if info["dtype"] == "F32":
            array = np.frombuffer(raw, dtype="<f4")
        elif info["dtype"] == "F16":
            array = np.frombuffer(raw, dtype="<f2")
        elif info["dtype"] == "BF16":
            array = (np.frombuffer(raw, dtype="<u2").astype(np.uint32) << 16).view(np.float32)
        else:
            raise ValueError(f"{name}: dtype {info['dtype']}")
        tensors[name] = array.astype(np.float64).reshape(info["shape"])
    return tensors


def rms_norm(x, weight, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * weight


def rotate_half(x):
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


def hidden_states(config, weights, tokens):
    """The Llama model's last hidden states after the final norm, [len(tokens), hidden]."""
    n = len(tokens)
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    d = config.get("head_dim", config["hidden_size"] // heads)
    eps = config["rms_norm_eps"]
    inv_freq = 1.0 / (config.get("rope_theta", 10000.0) ** (np.arange(0, d, 2) / d))
    angles = np.outer(np.arange(n), inv_freq)
    cos = np.cos(np.concatenate([angles, angles], axis=-1))[:, None, :]
    sin = np.sin(np.concatenate([angles, angles], axis=-1))[:, None, :]
    mask = np.triu(np.full((n, n), -np.inf), k=1)
    x = weights["model.embed_tokens.weight"][tokens]
    for layer in range(config["num_hidden_layers"]):
        p = f"model.layers.{layer}."
        h = rms_norm(x, weights[p + "input_layernorm.weight"], eps)
        q = (h @ weights[p + "self_attn.q_proj.weight"].T).reshape(n, heads, d)
        k = (h @ weights[p + "self_attn.k_proj.weight"].T).reshape(n, kv_heads, d)
        v = (h @ weights[p + "self_attn.v_proj.weight"].T).reshape(n, kv_heads, d)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        group = heads // kv_heads
        out = np.empty((n, heads, d))
        for head in range(heads):
            kv = head // group
            scores = q[:, head, :] @ k[:, kv, :].T / np.sqrt(d) + mask
            scores = np.exp(scores - scores.max(axis=-1, keepdims=True))
            out[:, head, :] = (scores / scores.sum(axis=-1, keepdims=True)) @ v[:, kv, :]
        x = x + out.reshape(n, heads * d) @ weights[p + "self_attn.o_proj.weight"].T
        h = rms_norm(x, weights[p + "post_attention_layernorm.weight"], eps)
        gate = h @ weights[p + "mlp.gate_proj.weight"].T
        up = h @ weights[p + "mlp.up_proj.weight"].T
        x = x + (gate / (1 + np.exp(-gate)) * up) @ weights[p + "mlp.down_proj.weight"].T
    return rms_norm(x, weights["model.norm.weight"], eps)


def pooled(config, weights, tokens, pooling, normalize, dimensions=None):
    states = hidden_states(config, weights, tokens)
    vector = states.mean(axis=0) if pooling == "mean" else states[-1]
    if dimensions:
        vector = vector[:dimensions]
    return vector / np.linalg.norm(vector) if normalize else vector


def largest_difference(got, want):
    got = np.asarray(got, dtype=np.float64)
    expect(got.shape == want.shape, f"embedding of shape {got.shape}, expected {want.shape}")
    return float(np.max(np.abs(got - want)) / max(np.max(np.abs(want)), 1e-12))


def add_sentence_transformers_files(model_dir):
    with open(os.path.join(model_dir, "modules.json"), "w") as f:
        json.dump([
            {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
            {"idx": 1, "name": "1", "path": "1_Pooling",
             "type": "sentence_transformers.models.Pooling"},
            {"idx": 2, "name": "2", "path": "2_Normalize",
             "type": "sentence_transformers.models.Normalize"},
        ], f)
    os.makedirs(os.path.join(model_dir, "1_Pooling"))
    with open(os.path.join(model_dir, "1_Pooling", "config.json"), "w") as f:
        json.dump({"word_embedding_dimension": 64, "pooling_mode_mean_tokens": True,
                   "pooling_mode_cls_token": False, "pooling_mode_lasttoken": False,
                   "include_prompt": True}, f)
    config_path = os.path.join(model_dir, "config.json")
    with open(config_path) as f:
        config = json.load(f)
    config["matryoshka_dimensions"] = MATRYOSHKA
    with open(config_path, "w") as f:
        json.dump(config, f)
    return config


def embed(gateway, body):
    result = post_json(gateway.http_port, "/v1/embeddings", body)
    expect(result.status == 200, f"/v1/embeddings {json.dumps(body)[:200]}: {result}")
    return result.json()


def run(binaries):
    if np is None:
        log("SKIPPED: python3-numpy is not installed (scripts/install-deps.sh installs it)")
        sys.exit(77)
    summary = {}
    with Cluster(*binaries, prefix="embeddings") as cluster:
        try:
            cluster.make_model()
            config = add_sentence_transformers_files(cluster.model)
            expect(config["hidden_size"] == 64, "the tiny preset's hidden size changed")
            weights = load_safetensors(os.path.join(cluster.model, "model.safetensors"))
            mean_worker = cluster.start_worker("worker-mean", "--task=embed",
                                               "--max_num_batched_tokens=16")
            process = cluster.start("worker-last", [
                cluster.worker_bin, f"--model={cluster.model}", "--served_model_name=tiny-last",
                "--host=127.0.0.1", "--port=0", "--metrics_port=0", "--threads=1",
                "--kv_cache_memory=32MiB", "--task=embed", "--pooling=last",
                "--normalize_embeddings=false"])
            match = process.wait_for(r"serving tiny-last on 127\.0\.0\.1:(\d+)")
            last_worker = Worker("worker-last", process, "127.0.0.1", int(match.group(1)), None)
            expect("mean pooling (sentence-transformers config), normalized" in
                   mean_worker.process.output(), "the worker did not read the pooling module")
            gateway = cluster.start_gateway([mean_worker, last_worker])
            cluster.wait_ready(gateway, [mean_worker, last_worker])

            inputs = [[5, 17, 300, 42], list(range(100, 141)), [7]]
            body = embed(gateway, {"model": "tiny", "input": inputs})
            expect([item["index"] for item in body["data"]] == [0, 1, 2], f"order: {body}")
            expect(body["usage"]["prompt_tokens"] == sum(map(len, inputs)), f"usage: {body}")
            worst = 0.0
            for tokens, item in zip(inputs, body["data"]):
                want = pooled(config, weights, tokens, "mean", True)
                worst = max(worst, largest_difference(item["embedding"], want))
            summary["mean_normalized_max_rel_diff"] = worst
            expect(worst < TOLERANCE, f"mean pooling differs from the reference by {worst}")

            cut = embed(gateway, {"model": "tiny", "input": [inputs[1]], "dimensions": 16,
                                  "encoding_format": "base64"})
            raw = base64.b64decode(cut["data"][0]["embedding"])
            values = np.frombuffer(raw, dtype="<f4")
            want = pooled(config, weights, inputs[1], "mean", True, dimensions=16)
            summary["matryoshka_16_max_rel_diff"] = largest_difference(values, want)
            expect(summary["matryoshka_16_max_rel_diff"] < TOLERANCE,
                   f"dimensions=16 differs by {summary['matryoshka_16_max_rel_diff']}")

            body = embed(gateway, {"model": "tiny-last", "input": inputs[:2]})
            worst = 0.0
            for tokens, item in zip(inputs, body["data"]):
                want = pooled(config, weights, tokens, "last", False)
                worst = max(worst, largest_difference(item["embedding"], want))
            summary["last_raw_max_rel_diff"] = worst
            expect(worst < TOLERANCE, f"last pooling differs from the reference by {worst}")

            refused = post_json(gateway.http_port, "/v1/embeddings",
                                {"model": "tiny", "input": "hi", "dimensions": 20})
            expect(refused.status == 400 and "16, 32, 64" in refused.text,
                   f"dimensions 20: {refused}")
            refused = post_json(gateway.http_port, "/v1/chat/completions",
                                {"model": "tiny", "messages": [{"role": "user", "content": "hi"}]})
            expect(refused.status == 400 and "serves embeddings" in refused.text,
                   f"chat to an embedding model: {refused}")
            text = embed(gateway, {"model": "tiny", "input": "a text input, tokenized"})
            expect(len(text["data"][0]["embedding"]) == 64 and text["usage"]["prompt_tokens"] > 1,
                   f"text input: {text}")
        except Exception:
            log(cluster.report())
            raise
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    sys.exit(run_binaries_test(run, __doc__))
