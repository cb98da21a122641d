#!/usr/bin/env python3
"""How long the real gateway takes to become ready when some of its workers never answer.

Starts one healthy llmserve-worker on a generated model and opens --blackholed loopback ports
that accept TCP connections and never answer (a hung worker process, or a host behind a firewall
that drops replies). Then, one after the other, it starts llmserve-gateway with --workers listing
the healthy worker alone and with the blackholed ports listed before it, and measures from the
gateway's start until /readyz answers 200, until the first completion through it succeeds, and
how long SIGTERM takes to stop it. Prints one JSON object.

  scripts/bench-blackholed-workers.py [--build build] [--model tiny] [--blackholed 10] [--runs 3]
"""

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_status(url, body=None, timeout=5):
    request = urllib.request.Request(url, data=body,
                                     headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status
    except urllib.error.HTTPError as error:
        return error.code
    except OSError:
        return None


def run_gateway(bin_dir, workers, model, logs, name, patience_s):
    http_port = free_port()
    log = open(os.path.join(logs, f"{name}.log"), "w")
    start = time.monotonic()
    gateway = subprocess.Popen(
        [os.path.join(bin_dir, "llmserve-gateway"), "--host", "127.0.0.1", "--grpc-port", "0",
         "--http-port", str(http_port), "--workers", ",".join(workers)],
        stdout=log, stderr=subprocess.STDOUT)
    result = {"ready_s": None, "first_completion_s": None, "stop_s": None}
    try:
        base = f"http://127.0.0.1:{http_port}"
        while time.monotonic() - start < patience_s and result["ready_s"] is None:
            if get_status(base + "/readyz", timeout=1) == 200:
                result["ready_s"] = round(time.monotonic() - start, 3)
            else:
                time.sleep(0.01)
        body = json.dumps({"model": model, "prompt": "hello", "max_tokens": 4}).encode()
        while time.monotonic() - start < patience_s and result["first_completion_s"] is None:
            if get_status(base + "/v1/completions", body) == 200:
                result["first_completion_s"] = round(time.monotonic() - start, 3)
            else:
                time.sleep(0.01)
    finally:
        stop_start = time.monotonic()
        gateway.send_signal(signal.SIGTERM)
        try:
            gateway.wait(timeout=patience_s)
            result["stop_s"] = round(time.monotonic() - stop_start, 3)
        except subprocess.TimeoutExpired:
            gateway.kill()
            gateway.wait()
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--build", default="build")
    parser.add_argument("--model", default="tiny", help="llmserve-make-model preset")
    parser.add_argument("--blackholed", type=int, default=10)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--patience", type=float, default=120, help="seconds per phase")
    args = parser.parse_args()

    bin_dir = os.path.join(args.build, "bin")
    logs = tempfile.mkdtemp(prefix="bench-blackholed-")
    model_dir = os.path.join(logs, args.model)
    subprocess.run([os.path.join(bin_dir, "llmserve-make-model"), "--preset", args.model,
                    "--out", model_dir], check=True, stdout=subprocess.DEVNULL)
    holes = []
    for _ in range(args.blackholed):
        hole = socket.socket()
        hole.bind(("127.0.0.1", 0))
        hole.listen(64)  # connections complete in the backlog; nothing ever accepts them
        holes.append(hole)
    worker_port = free_port()
    worker = subprocess.Popen(
        [os.path.join(bin_dir, "llmserve-worker"), "--model", model_dir,
         "--served-model-name", args.model, "--host", "127.0.0.1", "--port", str(worker_port),
         "--metrics-port", "-1", "--threads", "1", "--kv-cache-memory", "64MiB"],
        stdout=open(os.path.join(logs, "worker.log"), "w"), stderr=subprocess.STDOUT)
    try:
        healthy = f"127.0.0.1:{worker_port}"
        deadline = time.monotonic() + args.patience
        while time.monotonic() < deadline:
            with socket.socket() as probe:
                if probe.connect_ex(("127.0.0.1", worker_port)) == 0:
                    break
            if worker.poll() is not None:
                sys.exit(f"bench-blackholed-workers: the worker exited; logs in {logs}")
            time.sleep(0.05)
        blackholed = [f"127.0.0.1:{h.getsockname()[1]}" for h in holes]
        runs = {"healthy_only": [], "with_blackholed": []}
        for i in range(args.runs):
            # Alternating, so that the machine's noise falls on both.
            runs["healthy_only"].append(
                run_gateway(bin_dir, [healthy], args.model, logs, f"alone{i}", args.patience))
            runs["with_blackholed"].append(
                run_gateway(bin_dir, blackholed + [healthy], args.model, logs, f"holes{i}",
                            args.patience))
        print(json.dumps({"model": args.model, "blackholed": args.blackholed, "runs": runs,
                          "logs": logs}, indent=1))
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            worker.wait(timeout=30)
        except subprocess.TimeoutExpired:
            worker.kill()
        for hole in holes:
            hole.close()


if __name__ == "__main__":
    main()
