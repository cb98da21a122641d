#!/usr/bin/python3
"""Soak: thousands of mixed requests through a gateway and two workers, 10 % cancelled.

Clients send, through the gateway's OpenAI HTTP API, a random mix of completions (text or token
ids) and chats, streamed or not, with random sampling parameters, stop strings, logprobs and n,
some of them invalid on purpose; one request in ten is abandoned at a random point (before the
response, after its head, or mid-stream). Two rounds. Then:
  - every request that was not abandoned ended with a result (200 with a finish reason for each
    choice; a stream ending with [DONE]) or a clear status (an error object with a message, as a
    4xx/5xx body or an SSE error event); none hung past its timeout;
  - once the load stops, the workers' running and waiting requests and KV cache usage return to
    zero and the gateway's active streams to zero;
  - the gateway's and the workers' resident memory after round 2 stays within a bound of what it
    was after round 1 (no growth per request).
Prints a JSON summary.

Under the sanitizers (make test-sanitize) a round is 1,000 requests, and the servers keep 8 MB of
freed memory in ASan's quarantine rather than the run's 64: the quarantine then fills within round
1, so that round 2's resident memory measures the servers, not the quarantine still filling. The
full 3,000 a round (100 s for both rounds there) are make test's; LeakSanitizer finds leaks here.

Usage: soak_test.py GATEWAY WORKER MAKE_MODEL [REQUESTS_PER_ROUND]
Exit 0 on success, 1 on failure.
"""

import http.client
import json
import os
import random
import re
import socket
import subprocess
import sys
import threading
import time

from e2e_support import (SANITIZER_SLOWDOWN, Cluster, Failure, exit_on_signals, metric_values,
                         wait_until)

REQUESTS_PER_ROUND = 3000 if SANITIZER_SLOWDOWN == 1 else 1000
SANITIZER_QUARANTINE_MB = 8
CLIENTS = 8
CANCEL_SHARE = 0.10
REQUEST_TIMEOUT_S = 60
PATIENCE_S = 60
# Resident memory may grow from round 1 to round 2 by this much (allocator caches, gRPC pools)
# but not with the number of requests.
RSS_GROWTH_BOUND_KB = 24 * 1024
RSS_GROWTH_BOUND_SHARE = 0.25


class Stack:
    """The tiny model, two workers and a gateway (a Cluster); every process is killed on exit."""

    def __init__(self, binaries):
        self.cluster = Cluster(*binaries, prefix="soak")

    def up(self):
        cluster = self.cluster
        cluster.make_model()
        self.workers = [cluster.start_worker(f"worker-{index}", "--kv_cache_memory=16MiB",
                                             "--max_num_seqs=16") for index in range(2)]
        self.gateway = cluster.start_gateway(self.workers, "--allow_unauthenticated")
        self.http_port = self.gateway.http_port
        cluster.wait_ready(self.gateway, self.workers, PATIENCE_S)

    def rss(self):
        return {process.name: process.rss_kb() for process in self.cluster.all}

    def idle(self):
        """(idle, what is not) from the workers' and the gateway's metrics."""
        busy = []
        for worker in self.workers:
            text = worker.metrics()
            for metric in ("llmserve_num_requests_running", "llmserve_num_requests_waiting",
                           "llmserve_kv_cache_usage_ratio"):
                values = metric_values(text, metric)
                if not values or any(v != 0 for v in values):
                    busy.append(f"{worker.name} {metric}={values}")
        active = metric_values(self.gateway.metrics(), "llmserve_gateway_active_streams")
        if active != [0.0]:
            busy.append(f"gateway llmserve_gateway_active_streams={active}")
        return not busy, busy

    def report(self):
        return self.cluster.report(12)

    def down(self):
        self.cluster.__exit__(None, None, None)


# ---- requests -------------------------------------------------------------------------------------

WORDS = "the a story of cats and dogs who ran far away into green hills under blue sky".split()


def random_text(rng, lo, hi):
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(lo, hi)))


def random_request(rng):
    """(path, body, expect_valid) for one random request."""
    chat = rng.random() < 0.4
    body = {"model": "tiny", "max_tokens": rng.randint(1, 64)}
    if rng.random() < 0.5:
        body["ignore_eos"] = True
    if rng.random() < 0.5:
        body["stream"] = True
        if rng.random() < 0.5:
            body["stream_options"] = {"include_usage": True}
    if rng.random() < 0.6:
        body["temperature"] = round(rng.uniform(0, 1.5), 2)
    if rng.random() < 0.3:
        body["top_p"] = round(rng.uniform(0.1, 1), 2)
    if rng.random() < 0.2:
        body["top_k"] = rng.randint(1, 50)
    if rng.random() < 0.3:
        body["seed"] = rng.randint(0, 2**31)
    if rng.random() < 0.2:
        body["stop"] = [rng.choice(WORDS) for _ in range(rng.randint(1, 3))]
    if rng.random() < 0.2:
        body["n"] = rng.randint(1, 3)
    if chat:
        path = "/v1/chat/completions"
        messages = [{"role": "user", "content": random_text(rng, 1, 30)}]
        if rng.random() < 0.3:
            messages.insert(0, {"role": "system", "content": random_text(rng, 1, 10)})
        body["messages"] = messages
        if rng.random() < 0.2:
            body["logprobs"] = True
            body["top_logprobs"] = rng.randint(0, 3)
    else:
        path = "/v1/completions"
        if rng.random() < 0.3:
            body["prompt"] = [rng.randint(3, 700) for _ in range(rng.randint(1, 60))]
        else:
            body["prompt"] = random_text(rng, 1, 60)
        if rng.random() < 0.2:
            body["logprobs"] = rng.randint(0, 3)
    valid = True
    if rng.random() < 0.05:
        # Invalid on purpose: must get a clear refusal.
        key, value = rng.choice([("temperature", -1), ("top_p", 2), ("max_tokens", -5),
                                 ("n", 0), ("presence_penalty", 9)])
        body[key] = value
        valid = False
    return path, body, valid


def check_error_object(text, where):
    try:
        error = json.loads(text).get("error") or {}
    except ValueError:
        return f"{where}: not JSON: {text[:200]!r}"
    if not error.get("message"):
        return f"{where}: no error message: {text[:200]!r}"
    return None


def check_response(status, text, body, valid):
    """None when the response is a result or a clear status; else what is wrong."""
    if status != 200:
        if valid and status not in (429, 503):
            return f"HTTP {status} for a valid request: {text[:300]!r}"
        return check_error_object(text, f"HTTP {status}")
    if not valid:
        # Only a stream may have started before refusing: its error must be an event.
        pass
    choices_expected = body.get("n", 1)
    if body.get("stream"):
        events = [e.strip() for e in text.split("\n\n") if e.strip()]
        if not events or events[-1] != "data: [DONE]":
            errors = [e for e in events if '"error"' in e]
            if errors:
                return check_error_object(errors[-1][len("data: "):], "SSE error event")
            return f"stream did not end with [DONE]: {events[-2:]!r}"
        finished = set()
        for event in events[:-1]:
            if not event.startswith("data: "):
                return f"not an SSE data event: {event[:200]!r}"
            chunk = json.loads(event[len("data: "):])
            if "error" in chunk:
                return check_error_object(event[len("data: "):], "SSE error event")
            for choice in chunk.get("choices") or []:
                if choice.get("finish_reason"):
                    finished.add(choice["index"])
        if len(finished) != choices_expected:
            return f"stream finished {sorted(finished)} of {choices_expected} choices"
        return None if valid else "an invalid request streamed a result"
    try:
        answer = json.loads(text)
    except ValueError:
        return f"unreadable body: {text[:200]!r}"
    choices = answer.get("choices") or []
    if len(choices) != choices_expected or not all(c.get("finish_reason") for c in choices):
        return f"expected {choices_expected} finished choices: {text[:300]!r}"
    return None if valid else "an invalid request got a result"


class Clients:
    def __init__(self, port, total, seed):
        self.port = port
        self.total = total
        self.rng_seed = seed
        self.lock = threading.Lock()
        self.next = 0
        self.outcomes = {}
        self.problems = []

    def count(self, outcome):
        with self.lock:
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1

    def take(self):
        with self.lock:
            if self.next >= self.total:
                return None
            self.next += 1
            return self.next

    def run(self, index):
        rng = random.Random(self.rng_seed * 1000 + index)
        while self.take() is not None:
            path, body, valid = random_request(rng)
            cancel_at = rng.choice(["send", "head", "body"]) if rng.random() < CANCEL_SHARE \
                else None
            try:
                self.one(path, body, valid, cancel_at, rng)
            except (OSError, http.client.HTTPException) as e:
                self.count("transport error")
                with self.lock:
                    self.problems.append(f"{path} {json.dumps(body)[:200]}: "
                                         f"{type(e).__name__}: {e}")

    def one(self, path, body, valid, cancel_at, rng):
        data = json.dumps(body)
        connection = http.client.HTTPConnection("127.0.0.1", self.port,
                                                timeout=REQUEST_TIMEOUT_S)
        try:
            connection.request("POST", path, data, {"Content-Type": "application/json"})
            if cancel_at == "send":
                self.count("cancelled after sending")
                return
            response = connection.getresponse()
            if cancel_at == "head":
                self.count("cancelled after the head")
                return
            if cancel_at == "body":
                response.read(rng.randint(1, 200))
                self.count("cancelled mid-body")
                return
            text = response.read().decode("utf-8", "replace")
        finally:
            if cancel_at is not None and connection.sock is not None:
                # Abrupt (a reset), like a client that goes away.
                try:
                    connection.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER,
                                               b"\x01\x00\x00\x00\x00\x00\x00\x00")
                except OSError:
                    pass
            connection.close()
        problem = check_response(response.status, text, body, valid)
        if problem is None:
            self.count(f"{response.status} {'valid' if valid else 'invalid'}")
        else:
            self.count("wrong")
            with self.lock:
                self.problems.append(f"{path} {data[:300]}: {problem}")

    def start_and_wait(self):
        threads = [threading.Thread(target=self.run, args=(i,), daemon=True)
                   for i in range(CLIENTS)]
        for thread in threads:
            thread.start()
        deadline = time.monotonic() + REQUEST_TIMEOUT_S * 5
        for thread in threads:
            thread.join(max(0, deadline - time.monotonic()))
        if any(thread.is_alive() for thread in threads):
            raise Failure("clients still waiting after the round's time limit: a request hung")


def wait_idle(stack):
    started = time.monotonic()
    busy = []

    def idle():
        nonlocal busy
        done, busy = stack.idle()
        return done

    wait_until("load, queues and KV cache back to zero once the load stops", idle, PATIENCE_S,
               0.2, describe=lambda: f"still busy: {busy}")
    return time.monotonic() - started


def main():
    binaries = sys.argv[1:4]
    per_round = int(sys.argv[4]) if len(sys.argv) > 4 else REQUESTS_PER_ROUND
    exit_on_signals()
    if "quarantine_size_mb=" in os.environ.get("ASAN_OPTIONS", ""):
        os.environ["ASAN_OPTIONS"] = re.sub(r"quarantine_size_mb=\d+",
                                            f"quarantine_size_mb={SANITIZER_QUARANTINE_MB}",
                                            os.environ["ASAN_OPTIONS"])
    stack = Stack(binaries)
    started = time.monotonic()
    summary = {"requests_per_round": per_round, "clients": CLIENTS, "rounds": []}
    try:
        stack.up()
        rss_before = stack.rss()
        rss_after = []
        for round_number in (1, 2):
            round_start = time.monotonic()
            clients = Clients(stack.http_port, per_round, round_number)
            clients.start_and_wait()
            seconds = time.monotonic() - round_start
            idle_after = wait_idle(stack)
            rss_after.append(stack.rss())
            summary["rounds"].append({
                "seconds": round(seconds, 1), "requests_per_s": round(per_round / seconds, 1),
                "outcomes": dict(sorted(clients.outcomes.items())),
                "idle_after_s": round(idle_after, 2), "rss_kb": rss_after[-1]})
            if clients.problems:
                raise Failure(f"round {round_number}: {len(clients.problems)} request(s) without "
                              "a result or a clear status:\n  " +
                              "\n  ".join(clients.problems[:15]))
        summary["rss_kb_at_start"] = rss_before
        for name in rss_after[0]:
            first, second = rss_after[0][name], rss_after[1][name]
            bound = first + max(RSS_GROWTH_BOUND_KB, first * RSS_GROWTH_BOUND_SHARE)
            if second > bound:
                raise Failure(f"{name}: resident memory grew from {first} kB after round 1 to "
                              f"{second} kB after round 2 (bound {int(bound)} kB)")
        summary["seconds"] = round(time.monotonic() - started, 1)
        print(json.dumps(summary, indent=1))
        return 0
    except (Failure, subprocess.SubprocessError, OSError, http.client.HTTPException) as e:
        print(f"FAIL: {e}", file=sys.stderr)
        print(json.dumps(summary, indent=1), file=sys.stderr)
        print(stack.report(), file=sys.stderr)
        return 1
    finally:
        stack.down()


if __name__ == "__main__":
    sys.exit(main())
