#!/usr/bin/env python3
"""Compares llmserve's logits with Hugging Face transformers on the same model directory.

  hf_parity.py --model DIR --prompts ids.txt --gen_len 8 \
      --ours cpu-f32=cpu.f32,cpu.jsonl,1e-5 --ours cuda-bf16=cuda.f32,cuda.jsonl,1e-3

Each --ours names a run of llmserve-dump-logits (its raw f32 logits file, its JSON lines and the
largest per-row NMSE allowed). The reference is transformers in f32 (TF32 off, eager attention) on
the GPU when there is one. Per run: the largest and mean per-row NMSE, sum((ours - ref)^2) /
sum(ref^2) over each prompt token's logits row, and the greedy tokens compared while the
reference's two best logits are more than 2% of the row's range apart (after a near tie two
correct implementations may diverge). Prints one JSON object; exits 1 when a run fails.
"""

import argparse
import json
import sys

import numpy as np
import torch
import transformers


def load_model(model_dir, device):
    kwargs = {"attn_implementation": "eager"}
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, dtype=torch.float32, **kwargs)
    except TypeError:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            model_dir, torch_dtype=torch.float32, **kwargs)
    return model.to(device).eval()


def reference(model, device, prompts, gen_len):
    rows, greedy, margins = [], [], []
    with torch.no_grad():
        for prompt in prompts:
            ids = torch.tensor([prompt], device=device)
            logits = model(ids).logits[0].float()
            rows.append(logits.cpu().numpy())
            tokens, step_margins = [], []
            for _ in range(gen_len):
                last = logits[-1]
                top2 = torch.topk(last, 2).values
                span = float(last.max() - last.min())
                step_margins.append(float(top2[0] - top2[1]) / span if span > 0 else 0.0)
                token = int(torch.argmax(last))
                tokens.append(token)
                ids = torch.cat([ids, torch.tensor([[token]], device=device)], dim=1)
                logits = model(ids).logits[0].float()
            greedy.append(tokens)
            margins.append(step_margins)
    return rows, greedy, margins


def compare(name, logits_path, jsonl_path, limit, prompts, ref_rows, ref_greedy, ref_margins):
    vocab = ref_rows[0].shape[1]
    ours = np.fromfile(logits_path, dtype=np.float32)
    want = sum(len(p) for p in prompts) * vocab
    if ours.size != want:
        return {"name": name, "ok": False,
                "error": f"{logits_path} has {ours.size} floats, expected {want}"}
    ours = ours.reshape(-1, vocab)
    with open(jsonl_path) as f:
        lines = [json.loads(line) for line in f if line.startswith("{")]
    nmse, offset = [], 0
    for rows in ref_rows:
        got = ours[offset:offset + rows.shape[0]].astype(np.float64)
        offset += rows.shape[0]
        ref = rows.astype(np.float64)
        nmse.extend((((got - ref) ** 2).sum(axis=1) / (ref ** 2).sum(axis=1)).tolist())
    compared = agreed = 0
    first_mismatch = None
    for p, (line, want_tokens, step_margins) in enumerate(zip(lines, ref_greedy, ref_margins)):
        for step, (got_token, want_token) in enumerate(zip(line["greedy"], want_tokens)):
            if step_margins[step] <= 0.02:
                break
            compared += 1
            if got_token != want_token:
                first_mismatch = first_mismatch or {"prompt": p, "step": step,
                                                    "ours": got_token, "reference": want_token}
                break
            agreed += 1
    result = {"name": name, "max_nmse": max(nmse), "mean_nmse": float(np.mean(nmse)),
              "nmse_limit": limit, "rows": len(nmse), "greedy_compared": compared,
              "greedy_agreed": agreed, "first_greedy_mismatch": first_mismatch}
    result["ok"] = bool(result["max_nmse"] <= limit and first_mismatch is None)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", required=True)
    parser.add_argument("--prompts", required=True)
    parser.add_argument("--gen_len", type=int, default=8)
    parser.add_argument("--ours", action="append", default=[],
                        help="NAME=LOGITS,JSONL,NMSE_LIMIT")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    with open(args.prompts) as f:
        prompts = [[int(t) for t in line.split()] for line in f if line.strip()]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    model = load_model(args.model, device)
    ref_rows, ref_greedy, ref_margins = reference(model, device, prompts, args.gen_len)
    report = {"reference": f"transformers {transformers.__version__} f32 on {device}",
              "prompts": len(prompts), "reference_greedy": ref_greedy,
              "reference_margins": [[round(m, 4) for m in ms] for ms in ref_margins],
              "runs": []}
    for spec in args.ours:
        name, _, rest = spec.partition("=")
        logits_path, jsonl_path, limit = rest.split(",")
        report["runs"].append(compare(name, logits_path, jsonl_path, float(limit), prompts,
                                      ref_rows, ref_greedy, ref_margins))
    report["ok"] = all(run["ok"] for run in report["runs"])
    print(json.dumps(report, indent=1))
    return 0 if report["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
