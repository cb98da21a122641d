#!/usr/bin/python3
"""Hostile structured-output constraints against the real gateway and two workers on loopback
(issue 28): every constraint that used to crash a worker (stack overflow in the matcher's
expansion) or stall it (masks costing seconds on the engine thread) gets a fast 400 naming the
limit, over every API field it can come through; the workers keep their PIDs; and an
unconstrained request keeps its time per token beside the most expensive constraint the budgets
let through.

  1. Refusals: `guided_regex` (the 20-byte request, the 21-byte stall, a counted star), a JSON
     Schema `pattern` in `response_format`, a GBNF `guided_grammar`, and a tool whose parameter
     schema has the pattern with a named `tool_choice`. Each: HTTP 400, an OpenAI error whose
     message says "too complex" or names the work limit, in under REFUSAL_BOUND_S; both workers
     still running with the same PIDs, and /readyz 200.
  2. A request that passes the compile-time checks but outgrows the matcher's per-token budget
     once its literal prefix is behind it ends with an error naming the limit (never a hang, and
     never retried elsewhere: each worker's failure counter, not its crash).
  3. Time per token of an unconstrained request alone, then beside a constrained one whose every
     step needs a fresh mask: within STEP_BOUND_S of its own (what the per-token budget allows,
     with room; before the budgets, one such request made others wait tens of seconds).
Prints a JSON summary of what it measured.

Usage: constraint_abuse_test.py GATEWAY WORKER MAKE_MODEL
Exit 0 on success, 1 on failure.
"""

import json
import sys
import threading
import time

from e2e_support import (SANITIZER_SLOWDOWN, Cluster, Failure, error_message, run_binaries_test,
                         expect, http_get, log, post_json)

REFUSAL_BOUND_S = 5.0 * SANITIZER_SLOWDOWN
# What one constrained request may add to another's step: the matcher's per-token budget
# (GrammarMatcher::kMaxWorkPerCall, 30-70 ms here), with room for a shared machine.
STEP_BOUND_S = 0.15 * SANITIZER_SLOWDOWN
TPOT_TOKENS = 64

NESTED = "((a?){0,256}){0,256}"


def completion(extra, max_tokens=8):
    body = {"model": "tiny", "prompt": "hi", "max_tokens": max_tokens, "temperature": 0}
    body.update(extra)
    return body


def chat(extra, max_tokens=8):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": max_tokens, "temperature": 0}
    body.update(extra)
    return body


def hostile_requests():
    tool = {"type": "function", "function": {
        "name": "f", "parameters": {"type": "object",
                                    "properties": {"a": {"type": "string", "pattern": NESTED}},
                                    "required": ["a"]}}}
    return [
        ("guided_regex, nested optional repetition (20 bytes)", "/v1/completions",
         completion({"guided_regex": NESTED})),
        ("guided_regex, the 21-byte stall", "/v1/completions",
         completion({"guided_regex": "((.?){0,180}){0,180}"})),
        ("guided_regex, counted star of a counted group", "/v1/completions",
         completion({"guided_regex": "(?:(?:(?:.{4096})*){0,64}){4096}"})),
        ("guided_regex, an exact count of an optional", "/v1/completions",
         completion({"guided_regex": "(.?){4096}"})),
        ("response_format json_schema with the pattern", "/v1/chat/completions",
         chat({"response_format": {"type": "json_schema", "json_schema": {
             "name": "x", "schema": {"type": "object",
                                     "properties": {"a": {"type": "string", "pattern": NESTED}},
                                     "required": ["a"]}}}})),
        ("guided_grammar, nested repetition", "/v1/completions",
         completion({"guided_grammar": 'root ::= x{0,256}\nx ::= y{0,256}\ny ::= "a"?\n'})),
        ("a tool's parameters with the pattern, named tool_choice", "/v1/chat/completions",
         chat({"tools": [tool], "tool_choice": {"type": "function", "function": {"name": "f"}}})),
    ]


def same_workers(cluster, workers, pids):
    for worker in workers:
        expect(cluster[worker.name].running(), f"{worker.name} is still running")
        expect(cluster[worker.name].pid == pids[worker.name],
               f"{worker.name} kept its PID {pids[worker.name]}")


def plain_tpot(gateway, body):
    """Seconds per generated token of a completion (all of its time over its tokens)."""
    result = post_json(gateway.http_port, "/v1/completions", body, timeout=120)
    expect(result.status == 200, f"the request succeeded: {result!r}")
    return result.seconds / result.json()["usage"]["completion_tokens"]


def run(binaries):
    summary = {}
    with Cluster(*binaries, prefix="constraints") as cluster:
        try:
            cluster.make_model()
            workers = [cluster.start_worker(f"worker-{i}") for i in range(2)]
            gateway = cluster.start_gateway(workers, "--max_attempts=3")
            cluster.wait_ready(gateway, workers)
            pids = {w.name: cluster[w.name].pid for w in workers}

            # 1. Refusals.
            refusals = {}
            for name, path, body in hostile_requests():
                result = post_json(gateway.http_port, path, body, timeout=60)
                message = error_message(result.text)
                log(f"{name}: HTTP {result.status} in {result.seconds:.3f} s: {message[:160]}")
                expect(result.status == 400, f"{name}: 400, got {result!r}")
                expect("too complex" in message or "matching work" in message,
                       f"{name}: the message names the limit: {message!r}")
                expect(result.seconds < REFUSAL_BOUND_S,
                       f"{name}: refused in {result.seconds:.2f} s (< {REFUSAL_BOUND_S})")
                same_workers(cluster, workers, pids)
                refusals[name] = round(result.seconds, 4)
            expect(http_get(gateway.http_port, "/readyz")[0] == 200, "the gateway is ready")
            summary["refusal_seconds"] = refusals

            # 2. Past the per-token budget after a literal prefix: an error, not a hang.
            result = post_json(gateway.http_port, "/v1/completions",
                               completion({"guided_regex": "abc(.?){2000}"}, max_tokens=16),
                               timeout=60)
            message = error_message(result.text)
            log(f"budget exceeded mid-request: HTTP {result.status}: {message[:200]}")
            expect(result.status == 400, f"the request over budget gets 400: {result!r}")
            expect("matching work" in message, f"the error names the budget: {message!r}")
            same_workers(cluster, workers, pids)
            summary["over_budget_seconds"] = round(result.seconds, 3)

            # 3. Time per token beside a constrained stream whose every step needs a fresh mask
            # (each position of an ambiguous repetition is a new matcher state).
            plain = completion({"ignore_eos": True}, max_tokens=TPOT_TOKENS)
            alone = min(plain_tpot(gateway, plain) for _ in range(3))
            heavy = completion({"guided_regex": "(x(.?){30}){60}"}, max_tokens=400)
            heavy_result = {}

            def run_heavy():
                heavy_result["r"] = post_json(gateway.http_port, "/v1/completions", heavy,
                                              timeout=300)

            thread = threading.Thread(target=run_heavy, daemon=True)
            thread.start()
            time.sleep(0.1)  # the constrained request is running
            beside = plain_tpot(gateway, plain)
            thread.join(timeout=300)
            expect("r" in heavy_result, "the constrained request ended")
            heavy_r = heavy_result["r"]
            expect(heavy_r.status == 200, f"the constrained request succeeded: {heavy_r!r}")
            heavy_tokens = heavy_r.json()["usage"]["completion_tokens"]
            log(f"time per token alone {alone * 1000:.2f} ms, beside the constrained request "
                f"{beside * 1000:.2f} ms; the constrained one {heavy_tokens} tokens in "
                f"{heavy_r.seconds:.2f} s")
            summary.update({"tpot_alone_ms": round(alone * 1000, 3),
                            "tpot_beside_ms": round(beside * 1000, 3),
                            "constrained_tpot_ms": round(heavy_r.seconds / heavy_tokens * 1000, 3)})
            expect(beside <= alone + STEP_BOUND_S,
                   f"an unconstrained request's time per token beside it ({beside * 1000:.1f} ms) "
                   f"is within {STEP_BOUND_S * 1000:.0f} ms of its own ({alone * 1000:.1f} ms)")
            same_workers(cluster, workers, pids)
        except Failure:
            log(cluster.report())
            raise
    print(json.dumps(summary, sort_keys=True))


if __name__ == "__main__":
    sys.exit(run_binaries_test(run, __doc__))
