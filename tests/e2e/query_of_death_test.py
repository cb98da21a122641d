#!/usr/bin/python3
"""Query-of-death protection, against the real gateway and workers on loopback.

Two workers behind one gateway (default flags: --max_attempts=3, --query_of_death_retries=0),
both started with the test-only fault flag --test_only_crash_on_prompt_tokens, which makes a
worker crash (SIGSEGV) in its Generate handler on a prompt holding the marker ids: a stand-in
for a request that kills whatever worker runs it.

1. The poisoned request (OpenAI completions, the prompt as token ids) gets a clear 503 whose
   message says the worker failed while running it; exactly one worker dies, the other keeps its
   PID and serves.
2. The identical request is refused with a 503 (over HTTP) and UNAVAILABLE (over gRPC, with its
   own request id, which the gateway logs) without reaching a worker: the surviving worker's
   request and token counters do not move, and it is still alive.
3. An ordinary request is served by the survivor.
4. The gateway's metrics count one crash given up on and two quarantine refusals; its log names
   the request ids.

Usage: query_of_death_test.py GATEWAY WORKER MAKE_MODEL
Exit 0 on success, 77 (skipped) without python3-grpcio, 1 on failure.
"""

import json
import subprocess
import sys
import time

from e2e_support import (SKIP, Cluster, Failure, error_message, exit_on_signals, expect,
                         grpc_channel, have_grpcio, log, metric_samples, metric_sum, metric_sums,
                         pb_message, poll, post_json, raw_unary)

# Ids of the tiny model's vocabulary that no ordinary prompt here holds in a row.
MARKER = [97, 98, 99, 100, 101]
POISON_PROMPT = [40, 41] + MARKER + [42]
# Long enough to see that no second worker dies, short for a 2-core machine.
SETTLE_S = 2.0


def worker_counters(worker):
    """The worker's request and token counters (any sample that moves when it runs a request)."""
    sums = metric_sums(worker.metrics())
    return {name: value for name, value in sums.items()
            if name.startswith("llmserve_request_") or name in (
                "llmserve_prompt_tokens_total", "llmserve_generation_tokens_total")}


def completion(port, prompt, max_tokens=4):
    return post_json(port, "/v1/completions",
                     {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens})


def grpc_generate(port, token_ids, request_id, max_tokens=4):
    # GenerateRequest{model: "tiny", token_ids: {ids}, stopping: {max_tokens}, request_id}
    ids = pb_message(*[(1, i) for i in token_ids])
    request = pb_message((1, "tiny"), (3, ids), (6, pb_message((1, max_tokens))),
                         (8, request_id))
    channel = grpc_channel(port)
    try:
        return raw_unary(channel, "/llmserve.v1.Inference/Generate", request)
    finally:
        channel.close()


def run(binaries):
    started = time.monotonic()
    summary = {}
    with Cluster(*binaries, prefix="qod") as cluster:
        try:
            cluster.make_model()
            marker = "--test_only_crash_on_prompt_tokens=" + ",".join(map(str, MARKER))
            workers = [cluster.start_worker(f"worker-{i}", marker) for i in range(2)]
            pids = {w.name: w.process.pid for w in workers}
            gateway = cluster.start_gateway(workers, "--routing=round_robin")
            cluster.wait_ready(gateway, workers)

            # 1. The poisoned request: one worker dies, the client gets a clear 503.
            began = time.monotonic()
            response = completion(gateway.http_port, POISON_PROMPT)
            took = time.monotonic() - began
            message = error_message(response.text) or ""
            expect(response.status == 503,
                   f"poison: expected HTTP 503, got {response.status}: {response.text[:300]!r}")
            expect("failed while running this request" in message,
                   f"poison: expected the message to say the worker failed while running the "
                   f"request, got {message!r}")
            expect(poll(lambda: sum(not w.process.running() for w in workers) >= 1, 10),
                   "poison: expected a worker to have died")
            time.sleep(SETTLE_S)
            dead = [w for w in workers if not w.process.running()]
            alive = [w for w in workers if w.process.running()]
            expect(len(dead) == 1 and len(alive) == 1,
                   f"poison: expected exactly one worker to die, {len(dead)} did")
            survivor = alive[0]
            expect(survivor.process.pid == pids[survivor.name],
                   f"poison: the surviving worker's PID changed")
            log(f"poison: HTTP 503 in {took:.2f} s ({message!r}); {dead[0].name} died (exit "
                f"{dead[0].process.popen.returncode}), {survivor.name} lives")
            summary["poison"] = {"status": response.status, "seconds": round(took, 2),
                                 "message": message, "died": dead[0].name,
                                 "exit_code": dead[0].process.popen.returncode}

            # 2. The identical request, over both APIs: refused without reaching a worker.
            before = worker_counters(survivor)
            began = time.monotonic()
            again = completion(gateway.http_port, POISON_PROMPT)
            refusal_s = time.monotonic() - began
            again_message = error_message(again.text) or ""
            expect(again.status == 503,
                   f"quarantine: expected HTTP 503 for the identical request, got "
                   f"{again.status}: {again.text[:300]!r}")
            expect("identical request" in again_message,
                   f"quarantine: expected the message to say an identical request made a worker "
                   f"fail, got {again_message!r}")
            import grpc
            code, details, _ = grpc_generate(gateway.grpc_port, POISON_PROMPT, "qod-grpc-resend")
            expect(code == grpc.StatusCode.UNAVAILABLE and "identical request" in details,
                   f"quarantine: expected gRPC UNAVAILABLE naming the identical request, got "
                   f"{code}: {details!r}")
            after = worker_counters(survivor)
            expect(after == before,
                   f"quarantine: the surviving worker's counters moved: "
                   f"{ {k: (before.get(k), v) for k, v in after.items() if before.get(k) != v} }")
            expect(survivor.process.running() and survivor.process.pid == pids[survivor.name],
                   "quarantine: the surviving worker died")
            log(f"quarantine: identical request refused in {refusal_s * 1000:.1f} ms (HTTP 503: "
                f"{again_message!r}; gRPC {code.name}); the survivor's counters did not move")
            summary["quarantine"] = {"http_status": again.status, "grpc_code": code.name,
                                     "refusal_ms": round(refusal_s * 1000, 1),
                                     "message": again_message}

            # 3. An ordinary request is served by the survivor.
            success_before = metric_sum(survivor.metrics(), "llmserve_request_success_total")
            ordinary = completion(gateway.http_port, "an ordinary prompt")
            expect(ordinary.status == 200,
                   f"ordinary: expected 200, got {ordinary.status}: {ordinary.text[:300]!r}")
            served = metric_sum(survivor.metrics(), "llmserve_request_success_total")
            expect(served == success_before + 1,
                   f"ordinary: expected the survivor to serve it ({success_before} -> {served})")

            # 4. Metrics and logs.
            text = gateway.metrics()
            crashes = {labels.get("action"): value for labels, value in
                       metric_samples(text, "llmserve_gateway_query_of_death_crashes_total")}
            refused = metric_sum(text, "llmserve_gateway_query_of_death_refused_total")
            quarantined = metric_sum(text, "llmserve_gateway_query_of_death_quarantined")
            expect(crashes == {"retried": 0, "failed": 1},
                   f"metrics: expected one crash given up on and none retried: {crashes}")
            expect(refused == 2, f"metrics: expected 2 quarantine refusals, got {refused}")
            expect(quarantined == 1, f"metrics: expected 1 fingerprint quarantined: {quarantined}")
            output = gateway.process.output()
            expect("went away while running it" in output,
                   "logs: expected the gateway to log the worker that went away")
            expect("request qod-grpc-resend refused without reaching a worker" in output or
                   "more refusals not logged" in output,
                   "logs: expected the gateway to log the refused request's id")
            summary["metrics"] = {"crashes": crashes, "refused": refused,
                                  "quarantined": quarantined}
        except (Failure, subprocess.SubprocessError, OSError) as error:
            print(json.dumps(summary, indent=1), file=sys.stderr)
            print(f"FAIL: {error}\n{cluster.report()}", file=sys.stderr, flush=True)
            return 1
    summary["seconds"] = round(time.monotonic() - started, 1)
    print("QUERY_OF_DEATH_TEST_RESULT " + json.dumps(summary, indent=1), flush=True)
    return 0


def main():
    if len(sys.argv) != 4:
        print(__doc__, file=sys.stderr)
        return 2
    if not have_grpcio():
        print("SKIP: python3-grpcio is not installed (run with /usr/bin/python3)",
              file=sys.stderr)
        return SKIP
    exit_on_signals()
    return run(sys.argv[1:4])


if __name__ == "__main__":
    sys.exit(main())
