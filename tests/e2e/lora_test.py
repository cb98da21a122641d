#!/usr/bin/python3
"""LoRA adapters (issue 34) through the real gateway and workers on loopback. The test writes a
PEFT adapter for the generated tiny model (random A and B for q_proj, v_proj and down_proj, rank
8, lora_alpha 16) and, independently, a copy of the model with the adapter merged into its
weights (W + alpha / r * B A, in NumPy float64, stored as float32). One worker serves the base
model with the adapter (--lora_modules sql=DIR), another serves the merged copy:

  1. /v1/models lists "sql" with parent "tiny".
  2. Greedy completions and chats of model "sql" through the gateway equal those of the merged
     model, token for token; the base model "tiny" answers differently. A second adapter "chat"
     (rank 64, rsLoRA, all seven projections) gives its merged model's tokens and logprobs
     (within 1e-4).
  3. The adapter's usage and the response name it; a name nobody serves is a 404.
  4. The gateway's admin endpoints (an anonymous loopback gateway: every caller is admin):
     /v1/load_lora_adapter loads the same directory as "sql2" on the worker that loads at run time
     (its completions equal the merged model's too), /v1/unload_lora_adapter removes it (then a
     404). With grpcio: a worker that lost an adapter the gateway loaded (unloaded behind the
     gateway's back, as a restart would) gets it again on demand, and the next request succeeds.
  5. The worker's /metrics has the LoRA series, vLLM's vllm:lora_requests_info among them.
Prints a JSON summary.

Usage: lora_test.py GATEWAY WORKER MAKE_MODEL
Exit 0 on success, 1 on failure, 77 when NumPy is missing (skipped).
"""

import json
import os
import re
import shutil
import struct
import sys

from e2e_support import (Cluster, Worker, expect, grpc_channel, have_grpcio, http_get, log,
                         pb_message, post_json, raw_unary, run_binaries_test)

try:
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

RANK, ALPHA = 8, 16.0
PROMPTS = ["Hello there, how", "The capital of France is", "1, 2, 3, 4,"]


def read_safetensors(path):
    with open(path, "rb") as f:
        data = f.read()
    length = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + length])
    tensors = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        start, end = info["data_offsets"]
        expect(info["dtype"] == "F32", f"{name}: expected F32 weights, got {info['dtype']}")
        tensors[name] = np.frombuffer(data[8 + length + start:8 + length + end],
                                      dtype="<f4").reshape(info["shape"])
    return tensors


def write_safetensors(path, tensors):
    header, offset, blobs = {}, 0, []
    for name, array in tensors.items():
        blob = np.ascontiguousarray(array, dtype="<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(array.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        offset += len(blob)
        blobs.append(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_adapter_and_merged(model_dir, adapter_dir, merged_dir, rank=RANK, alpha=ALPHA,
                             rslora=False, targets=("q_proj", "v_proj", "down_proj"), seed=7,
                             scale=0.3):
    """A random PEFT adapter in adapter_dir and the model with it merged (NumPy float64, stored
    as float32) in merged_dir; the number of adapted weights."""
    weights = read_safetensors(os.path.join(model_dir, "model.safetensors"))
    rng = np.random.default_rng(seed)
    scaling = alpha / (np.sqrt(rank) if rslora else rank)
    adapter, merged = {}, dict(weights)
    for name in sorted(weights):
        if not name.endswith(tuple(f"{t}.weight" for t in targets)):
            continue
        out_dim, in_dim = weights[name].shape
        a = rng.uniform(-scale, scale, (rank, in_dim)).astype(np.float32)
        b = rng.uniform(-scale, scale, (out_dim, rank)).astype(np.float32)
        stem = "base_model.model." + name[:-len(".weight")]
        adapter[stem + ".lora_A.weight"] = a
        adapter[stem + ".lora_B.weight"] = b
        delta = scaling * (b.astype(np.float64) @ a.astype(np.float64))
        merged[name] = (weights[name].astype(np.float64) + delta).astype(np.float32)
    os.makedirs(adapter_dir)
    write_safetensors(os.path.join(adapter_dir, "adapter_model.safetensors"), adapter)
    with open(os.path.join(adapter_dir, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", "r": rank, "lora_alpha": alpha,
                   "target_modules": list(targets), "bias": "none",
                   "use_rslora": rslora, "use_dora": False, "base_model_name_or_path": "tiny"}, f)
    shutil.copytree(model_dir, merged_dir)
    write_safetensors(os.path.join(merged_dir, "model.safetensors"), merged)
    return len(adapter) // 2


def start_served(cluster, name, model_dir):
    """A worker serving `model_dir` as `name`."""
    process = cluster.start(f"worker-{name}", [
        cluster.worker_bin, f"--model={model_dir}", f"--served_model_name={name}",
        "--host=127.0.0.1", "--port=0", "--metrics_port=0", "--threads=1",
        "--kv_cache_memory=32MiB"])
    match = process.wait_for(rf"serving {re.escape(name)} on 127\.0\.0\.1:(\d+)")
    return Worker(f"worker-{name}", process, "127.0.0.1", int(match.group(1)), None)


def complete(gateway, model, prompt, logprobs=None):
    body = {"model": model, "prompt": prompt, "max_tokens": 16, "temperature": 0,
            "ignore_eos": True}
    if logprobs is not None:
        body["logprobs"] = logprobs
    result = post_json(gateway.http_port, "/v1/completions", body)
    expect(result.status == 200, f"completion of {model}: {result}")
    return result.json()


def admin_endpoints(gateway, worker, adapter_dir, merged_dir):
    """Step 4 and 5: loads, on-demand loads and unloads through the gateway; the metrics."""
    summary = {}
    loaded = post_json(gateway.http_port, "/v1/load_lora_adapter",
                       {"lora_name": "sql2", "lora_path": adapter_dir})
    expect(loaded.status == 200, f"load_lora_adapter: {loaded}")
    answer = loaded.json()
    expect(answer["workers"] == [f"127.0.0.1:{worker.port}"] and answer["base_model_name"] == "tiny",
           f"load_lora_adapter answer: {answer}")
    for prompt in PROMPTS[:2]:
        adapted = complete(gateway, "sql2", prompt)
        reference = complete(gateway, "merged", prompt)
        expect(adapted["choices"][0]["text"] == reference["choices"][0]["text"],
               f"{prompt!r}: runtime adapter {adapted['choices'][0]['text']!r} != merged")
    bad = post_json(gateway.http_port, "/v1/load_lora_adapter",
                    {"lora_name": "broken", "lora_path": merged_dir})
    expect(bad.status == 404 and "adapter_config.json" in bad.text, f"load of a model dir: {bad}")
    if have_grpcio():
        # Unloaded behind the gateway's back (as a restart would lose it): the next request
        # loads it again.
        code, details, _ = raw_unary(grpc_channel(worker.port),
                                     "/llmserve.worker.v1.Worker/UnloadLoraAdapter",
                                     pb_message((1, "sql2")))
        expect(str(code) == "StatusCode.OK", f"UnloadLoraAdapter: {code} {details}")
        # The gateway still believes the worker has it (its next load report has not come):
        # the worker refuses, the gateway learns it and loads the adapter again, and the very
        # next request succeeds.
        again = complete(gateway, "sql2", PROMPTS[0])
        reference = complete(gateway, "merged", PROMPTS[0])
        expect(again["choices"][0]["text"] == reference["choices"][0]["text"],
               "the adapter loaded again on demand answers differently")
        summary["loaded_on_demand"] = True
    unloaded = post_json(gateway.http_port, "/v1/unload_lora_adapter", {"lora_name": "sql2"})
    expect(unloaded.status == 200, f"unload_lora_adapter: {unloaded}")
    gone = post_json(gateway.http_port, "/v1/completions",
                     {"model": "sql2", "prompt": "x", "max_tokens": 2})
    expect(gone.status == 404, f"an unloaded adapter: {gone}")
    metrics = worker.metrics()
    expect('vllm:lora_requests_info{' in metrics and 'max_lora="4"' in metrics,
           "no vllm:lora_requests_info with max_lora 4 in the worker's metrics")
    expect("llmserve_lora_requests_info{" in metrics, "no llmserve_lora_requests_info")
    summary["admin_load_unload"] = True
    return summary


def run(binaries):
    if np is None:
        log("SKIPPED: python3-numpy is not installed (scripts/install-deps.sh installs it)")
        sys.exit(77)
    summary = {}
    with Cluster(*binaries, prefix="lora") as cluster:
        try:
            cluster.make_model()
            adapter_dir = os.path.join(cluster.temp, "sql")
            merged_dir = os.path.join(cluster.temp, "merged")
            summary["adapted_modules"] = write_adapter_and_merged(cluster.model, adapter_dir,
                                                                  merged_dir)
            # A second adapter: rank 64, rsLoRA, all seven projections, smaller values.
            chat_dir = os.path.join(cluster.temp, "chat")
            merged_chat_dir = os.path.join(cluster.temp, "merged-chat")
            summary["adapted_modules_chat"] = write_adapter_and_merged(
                cluster.model, chat_dir, merged_chat_dir, rank=64, alpha=16.0, rslora=True,
                targets=("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj",
                         "down_proj"), seed=11, scale=0.05)
            base = cluster.start_worker("worker-lora",
                                        f"--lora_modules=sql={adapter_dir},chat={chat_dir}",
                                        "--allow_runtime_lora_updating", "--vllm_metric_names")
            merged = start_served(cluster, "merged", merged_dir)
            merged_chat = start_served(cluster, "merged-chat", merged_chat_dir)
            gateway = cluster.start_gateway([base, merged, merged_chat])
            cluster.wait_ready(gateway, [base, merged, merged_chat])

            status, text = http_get(gateway.http_port, "/v1/models")
            models = {m["id"]: m for m in json.loads(text)["data"]}
            expect(status == 200 and models.get("sql", {}).get("parent") == "tiny",
                   f"/v1/models: {text}")
            differs = 0
            for prompt in PROMPTS:
                adapted = complete(gateway, "sql", prompt)
                reference = complete(gateway, "merged", prompt)
                plain = complete(gateway, "tiny", prompt)
                expect(adapted["model"] == "sql", f"response model: {adapted}")
                expect(adapted["choices"][0]["text"] == reference["choices"][0]["text"],
                       f"{prompt!r}: adapter {adapted['choices'][0]['text']!r} != merged "
                       f"{reference['choices'][0]['text']!r}")
                differs += adapted["choices"][0]["text"] != plain["choices"][0]["text"]
            summary["prompts"] = len(PROMPTS)
            summary["differ_from_base"] = differs
            # Rank 64 and rsLoRA: the same tokens and, within f32 rounding, the same logprobs.
            worst = 0.0
            for prompt in PROMPTS:
                adapted = complete(gateway, "chat", prompt, logprobs=2)["choices"][0]
                reference = complete(gateway, "merged-chat", prompt, logprobs=2)["choices"][0]
                expect(adapted["text"] == reference["text"],
                       f"{prompt!r}: adapter chat {adapted['text']!r} != merged "
                       f"{reference['text']!r}")
                for got, want in zip(adapted["logprobs"]["token_logprobs"],
                                     reference["logprobs"]["token_logprobs"]):
                    worst = max(worst, abs(got - want))
            expect(worst < 1e-4, f"adapter chat's logprobs differ from the merged model's by {worst}")
            summary["chat_logprob_max_abs_diff"] = worst
            expect(differs > 0, "the adapter changed no output: the test proves nothing")
            chat = {"messages": [{"role": "user", "content": "Say something."}],
                    "max_tokens": 12, "temperature": 0}
            adapted = post_json(gateway.http_port, "/v1/chat/completions", {"model": "sql", **chat})
            reference = post_json(gateway.http_port, "/v1/chat/completions",
                                  {"model": "merged", **chat})
            expect(adapted.status == 200 and reference.status == 200, f"chat: {adapted}")
            expect(adapted.json()["choices"][0]["message"]["content"] ==
                   reference.json()["choices"][0]["message"]["content"],
                   "chat of the adapter differs from the merged model's")
            missing = post_json(gateway.http_port, "/v1/completions",
                                {"model": "nope", "prompt": "x", "max_tokens": 2})
            expect(missing.status == 404, f"unknown model: {missing}")
            summary.update(admin_endpoints(gateway, base, adapter_dir, merged_dir))
        except Exception:
            log(cluster.report())
            raise
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    sys.exit(run_binaries_test(run, __doc__))
