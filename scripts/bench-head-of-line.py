#!/usr/bin/env python3
"""Head-of-line blocking on the gateway: inter-token latency of open SSE streams while large
prompts arrive.

Starts two workers and a gateway on loopback (free ports) on a generated model, then runs
llmserve-bench twice over the gateway's OpenAI HTTP API, each time keeping --streams streams open
(--max-concurrency; --streams * --rounds requests of --output-len tokens in all):

  quiet:  nothing else;
  loaded: meanwhile a POST /v1/completions with a --big-prompt-bytes text prompt every
          --interval seconds (each on its own connection, not waiting for the previous one).

The big prompts are longer than the model's context, so the gateway tokenizes each one (the
CPU work under test) and answers 400: the workers never see them, and what changes between the
two runs is the gateway alone. Prints one JSON object: both runs' llmserve-bench reports (ITL,
TPOT, TTFT percentiles) and the big prompts' statuses and latencies.

  scripts/bench-head-of-line.py [--build build] [--model tiny] [--streams 32] [--rounds 5]
      [--output-len 960] [--big-prompt-bytes 1000000] [--interval 0.1] [--gateway-args '...']
"""

import argparse
import http.client
import json
import os
import random
import shlex
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def big_prompt(size, seed=7):
    # Words of mixed length so that the byte-level BPE does real work (a repeated character is
    # cheaper to tokenize than text).
    rng = random.Random(seed)
    letters = "abcdefghijklmnopqrstuvwxyz"
    words = ["".join(rng.choice(letters) for _ in range(rng.randint(2, 9))) for _ in range(5000)]
    out, n = [], 0
    while n < size:
        word = rng.choice(words) + " "
        out.append(word)
        n += len(word)
    return "".join(out)[:size]


def wait_ready(http_port, procs, logs, patience_s=120):
    deadline = time.time() + patience_s
    while time.time() < deadline:
        for p in procs:
            if p.poll() is not None:
                sys.exit(f"bench-head-of-line: a server exited; logs in {logs}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/metrics", timeout=2) as r:
                text = r.read().decode()
            up = [l for l in text.splitlines()
                  if l.startswith("llmserve_gateway_worker_up{") and l.endswith(" 1")]
            if len(up) == 2:
                return
        except OSError:
            pass
        time.sleep(0.5)
    sys.exit(f"bench-head-of-line: the stack was not ready in {patience_s} s; logs in {logs}")


class BigPromptSender:
    """Sends one big prompt every `interval` seconds, each from its own thread."""

    def __init__(self, port, model, prompt, interval):
        self.port, self.interval = port, interval
        self.body = json.dumps({"model": model, "prompt": prompt, "max_tokens": 1}).encode()
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.results = []  # (status, seconds)
        self.threads = []

    def one(self):
        start = time.monotonic()
        status = "error"
        try:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
            conn.request("POST", "/v1/completions", self.body,
                         {"content-type": "application/json"})
            status = conn.getresponse().status
            conn.close()
        except OSError as e:
            status = type(e).__name__
        with self.lock:
            self.results.append((status, time.monotonic() - start))

    def run(self):
        next_send = time.monotonic()
        while not self.stop.is_set():
            t = threading.Thread(target=self.one, daemon=True)
            t.start()
            self.threads.append(t)
            next_send += self.interval
            self.stop.wait(max(0.0, next_send - time.monotonic()))

    def summary(self):
        for t in self.threads:
            t.join(timeout=120)
        statuses = {}
        for status, _ in self.results:
            statuses[str(status)] = statuses.get(str(status), 0) + 1
        latencies = sorted(s for _, s in self.results)

        def pct(p):
            return latencies[min(len(latencies) - 1, int(p * len(latencies)))] if latencies else None

        return {"sent": len(self.threads), "statuses": statuses,
                "latency_s": {"p50": pct(0.5), "p99": pct(0.99), "max": latencies[-1] if latencies else None}}


def run_bench(args, port, model_dir):
    cmd = [os.path.join(args.build, "bin", "llmserve-bench"), "--api", "openai",
           "--target", f"127.0.0.1:{port}", "--tokenizer", model_dir,
           "--request-rate", "inf", "--requests", str(args.streams * args.rounds),
           "--max-concurrency", str(args.streams),
           "--prompt-len", str(args.prompt_len), "--output-len", str(args.output_len),
           "--warmup", "2", "--format", "json", "--progress", "off",
           # With logprobs every token is an event of its own: the generated models' random
           # tokens are often partial UTF-8, whose text the gateway holds back until it completes.
           "--extra-body", '{"logprobs": 0}']
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default="tiny", help="llmserve-make-model preset")
    parser.add_argument("--streams", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=5,
                        help="requests per stream slot: --streams * --rounds requests in all")
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--output-len", type=int, default=960)
    parser.add_argument("--big-prompt-bytes", type=int, default=1000000)
    parser.add_argument("--interval", type=float, default=0.1)
    parser.add_argument("--gateway-args", default="", help="more llmserve-gateway flags")
    args = parser.parse_args()

    bin_dir = os.path.join(args.build, "bin")
    model_dir = os.path.join("models", args.model)
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        subprocess.run([os.path.join(bin_dir, "llmserve-make-model"), "--preset", args.model,
                        "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
    logs = tempfile.mkdtemp(prefix="bench-hol-")
    procs = []
    try:
        workers = []
        for i in range(2):
            port = free_port()
            procs.append(subprocess.Popen(
                [os.path.join(bin_dir, "llmserve-worker"), "--model", model_dir,
                 "--host", "127.0.0.1", "--port", str(port), "--metrics-port", "-1",
                 "--threads", "1", "--kv-cache-memory", "512MiB"],
                stdout=open(os.path.join(logs, f"worker{i}.log"), "w"), stderr=subprocess.STDOUT))
            workers.append(f"127.0.0.1:{port}")
        http_port = free_port()
        procs.append(subprocess.Popen(
            [os.path.join(bin_dir, "llmserve-gateway"), "--host", "127.0.0.1", "--grpc-port", "0",
             "--http-port", str(http_port), "--workers", ",".join(workers)]
            + shlex.split(args.gateway_args),
            stdout=open(os.path.join(logs, "gateway.log"), "w"), stderr=subprocess.STDOUT))
        wait_ready(http_port, procs, logs)

        quiet = run_bench(args, http_port, model_dir)
        sender = BigPromptSender(http_port, args.model, big_prompt(args.big_prompt_bytes),
                                 args.interval)
        sending = threading.Thread(target=sender.run, daemon=True)
        sending.start()
        time.sleep(0.5)  # the load is on before the streams start
        loaded = run_bench(args, http_port, model_dir)
        sender.stop.set()
        sending.join()

        def keep(report):
            return {k: report.get(k) for k in
                    ("completed", "failed", "itl_s", "tpot_s", "ttft_s", "elapsed_s")}

        print(json.dumps({
            "model": args.model, "streams": args.streams, "requests": args.streams * args.rounds,
            "output_len": args.output_len,
            "big_prompt_bytes": args.big_prompt_bytes, "interval_s": args.interval,
            "gateway_args": args.gateway_args,
            "quiet": keep(quiet), "loaded": keep(loaded), "big_prompts": sender.summary(),
        }, indent=1))
    finally:
        for p in procs:
            p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
