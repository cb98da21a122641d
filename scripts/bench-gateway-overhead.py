#!/usr/bin/env python3
"""The gateway's own cost: CPU time per streamed token and the latency it adds, per API.

Starts one worker and a gateway in front of it on loopback (free ports) on a generated model, then
runs the same llmserve-bench load three times, one run at a time:

  worker:     straight to the worker's llmserve.worker.v1.Worker API (no gateway: the baseline);
  inference:  through the gateway's gRPC llmserve.v1.Inference API (GenerateStream);
  openai:     through the gateway's OpenAI HTTP API, streamed (SSE, logprobs on so that every
              token is an event of its own).

With --traced, a second gateway in front of the same worker records every request's trace
(--trace_sample_ratio=1, gzip) and exports it to an OTLP/HTTP receiver in this script, which
answers 200 and counts what it gets; the inference and openai runs are repeated through it
(inference_traced, openai_traced), one after another with the others.

The gateway's CPU time (user + system, from /proc) is read before and after each run; divided by
the tokens streamed it is the gateway's CPU per token. TTFT and TPOT percentiles come from
llmserve-bench. Prints one JSON object.

  scripts/bench-gateway-overhead.py [--build build] [--model tiny] [--requests 256]
      [--concurrency 16] [--prompt-len 64] [--output-len 256] [--traced]
"""

import argparse
import http.server
import json
import threading
import os
import subprocess
import sys
import tempfile
import time
import urllib.request
import socket


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    # utime and stime are fields 14 and 15 of the whole line; here, after "pid (comm)", 12 and 13.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def wait_ready(http_port, procs, logs, patience_s=120):
    deadline = time.time() + patience_s
    while time.time() < deadline:
        for p in procs:
            if p.poll() is not None:
                sys.exit(f"bench-gateway-overhead: a server exited; logs in {logs}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{http_port}/readyz", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.2)
    sys.exit(f"bench-gateway-overhead: the stack was not ready in {patience_s} s; logs in {logs}")


class OtlpSink(http.server.BaseHTTPRequestHandler):
    """Answers every OTLP export 200 and counts it."""
    exports = 0
    bytes = 0

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("content-length", 0)))
        OtlpSink.exports += 1
        OtlpSink.bytes += len(body)
        self.send_response(200)
        self.send_header("content-length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


def run_bench(args, api, target, model_dir):
    cmd = [os.path.join(args.build, "bin", "llmserve-bench"), "--api", api, "--target", target,
           "--tokenizer", model_dir, "--request-rate", "inf", "--requests", str(args.requests),
           "--max-concurrency", str(args.concurrency), "--prompt-len", str(args.prompt_len),
           "--output-len", str(args.output_len), "--warmup", "2", "--format", "json",
           "--progress", "off"]
    if api == "openai":
        cmd += ["--extra-body", '{"logprobs": 0}']
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default="tiny", help="llmserve-make-model preset")
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=64)
    parser.add_argument("--output-len", type=int, default=256)
    parser.add_argument("--traced", action="store_true",
                        help="also through a gateway that traces every request")
    args = parser.parse_args()

    bin_dir = os.path.join(args.build, "bin")
    model_dir = os.path.join("models", args.model)
    if not os.path.exists(os.path.join(model_dir, "config.json")):
        subprocess.run([os.path.join(bin_dir, "llmserve-make-model"), "--preset", args.model,
                        "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
    logs = tempfile.mkdtemp(prefix="bench-gateway-overhead-")
    procs = []
    try:
        worker_port, grpc_port, http_port = free_port(), free_port(), free_port()
        procs.append(subprocess.Popen(
            [os.path.join(bin_dir, "llmserve-worker"), "--model", model_dir, "--host",
             "127.0.0.1", "--port", str(worker_port), "--metrics-port", "-1", "--threads", "1",
             "--kv-cache-memory", "512MiB"],
            stdout=open(os.path.join(logs, "worker.log"), "w"), stderr=subprocess.STDOUT))
        gateway = subprocess.Popen(
            [os.path.join(bin_dir, "llmserve-gateway"), "--host", "127.0.0.1", "--grpc-port",
             str(grpc_port), "--http-port", str(http_port), "--workers",
             f"127.0.0.1:{worker_port}"],
            stdout=open(os.path.join(logs, "gateway.log"), "w"), stderr=subprocess.STDOUT)
        procs.append(gateway)
        wait_ready(http_port, procs, logs)
        plan = [("worker", "worker", f"127.0.0.1:{worker_port}", gateway),
                ("inference", "inference", f"127.0.0.1:{grpc_port}", gateway),
                ("openai", "openai", f"127.0.0.1:{http_port}", gateway)]
        if args.traced:
            sink = http.server.ThreadingHTTPServer(("127.0.0.1", 0), OtlpSink)
            threading.Thread(target=sink.serve_forever, daemon=True).start()
            traced_grpc, traced_http = free_port(), free_port()
            traced = subprocess.Popen(
                [os.path.join(bin_dir, "llmserve-gateway"), "--host", "127.0.0.1", "--grpc-port",
                 str(traced_grpc), "--http-port", str(traced_http), "--workers",
                 f"127.0.0.1:{worker_port}",
                 f"--otlp-traces-endpoint=http://127.0.0.1:{sink.server_address[1]}/v1/traces",
                 "--trace-sample-ratio=1"],
                stdout=open(os.path.join(logs, "gateway-traced.log"), "w"),
                stderr=subprocess.STDOUT)
            procs.append(traced)
            wait_ready(traced_http, procs, logs)
            plan += [("inference_traced", "inference", f"127.0.0.1:{traced_grpc}", traced),
                     ("openai_traced", "openai", f"127.0.0.1:{traced_http}", traced)]

        runs = {}
        for name, api, target, server in plan:
            before = cpu_seconds(server.pid)
            report = run_bench(args, api, target, model_dir)
            cpu = cpu_seconds(server.pid) - before
            tokens = report.get("output_tokens") or args.requests * args.output_len
            runs[name] = {
                "completed": report.get("completed"), "failed": report.get("failed"),
                "output_tokens": tokens, "gateway_cpu_s": round(cpu, 3),
                "gateway_cpu_us_per_token": round(1e6 * cpu / tokens, 2) if tokens else None,
                "ttft_s": report.get("ttft_s"), "tpot_s": report.get("tpot_s"),
                "elapsed_s": report.get("elapsed_s"),
            }
        base = runs["worker"]["ttft_s"] or {}
        for api in [name for name in runs if name != "worker"]:
            ttft = runs[api]["ttft_s"] or {}
            runs[api]["ttft_added_ms"] = {
                k: round(1000 * (ttft[k] - base[k]), 2) for k in ("p50", "p99")
                if isinstance(ttft.get(k), (int, float)) and isinstance(base.get(k), (int, float))}
        result = {"model": args.model, "requests": args.requests,
                  "concurrency": args.concurrency, "prompt_len": args.prompt_len,
                  "output_len": args.output_len, "runs": runs}
        if args.traced:
            # Per request: the traced run's gateway CPU over the untraced one's, same load.
            result["traced_cpu_ratio"] = {
                api: round(runs[f"{api}_traced"]["gateway_cpu_s"] / runs[api]["gateway_cpu_s"], 3)
                for api in ("inference", "openai") if runs[api]["gateway_cpu_s"]}
            result["otlp_exports"] = {"posts": OtlpSink.exports, "bytes": OtlpSink.bytes}
        print(json.dumps(result, indent=1))
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()


if __name__ == "__main__":
    main()
