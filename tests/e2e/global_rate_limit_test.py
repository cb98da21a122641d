#!/usr/bin/python3
"""Rate limits and token quotas that hold across gateway replicas, with a real redis-server.

A worker on the tiny model and two gateways in front of it share one redis-server (Debian's,
started by the test on a random loopback port): gateway A with --redis_failure_policy=open,
gateway B with closed, both with --rate_limit_rpm=20 and a daily token quota.

  1. one key's requests alternate between A and B: exactly 20 of 30 in a minute are served, the
     rest get 429 with retry-after (the check and the count are one Lua script: no slack);
  2. the daily token quota of another key: exactly as many requests as fit are served, the next
     gets 429 naming the quota;
  3. redis-server killed: A (open) serves by its own per-replica limits, B (closed) refuses with
     503 at once; both count the failures and report redis_up 0;
  4. redis-server restarted: both reconnect, and the global limit holds again.

Prints a JSON summary.

Usage: global_rate_limit_test.py GATEWAY WORKER MAKE_MODEL
Exit 0 on success, 77 (skipped) without redis-server, 1 on failure.
"""

import hashlib
import json
import os
import shutil
import signal
import sys
import time

from e2e_support import (LOOPBACK, SKIP, Cluster, expect, free_port, log, metric_samples,
                         post_json, run_binaries_test, wait_until)

RPM = 20
QUOTA = 400


def metric(gateway, name):
    samples = metric_samples(gateway.metrics(), name)
    return samples[0][1] if samples else None


def align_to_minute(margin_s=20):
    """Waits for a new minute when fewer than `margin_s` seconds are left of this one: a phase
    that counts one window must not straddle two."""
    left = 60 - time.time() % 60
    if left < margin_s:
        log(f"waiting {left:.1f} s for the next minute's window")
        time.sleep(left + 0.5)


def completion(gateway, key, max_tokens=1, ignore_eos=False):
    body = {"model": "tiny", "prompt": "count me", "max_tokens": max_tokens}
    if ignore_eos:
        body["ignore_eos"] = True
    return post_json(gateway.http_port, "/v1/completions", body,
                     {"Authorization": f"Bearer {key}"})


def run(binaries):
    redis_bin = shutil.which("redis-server")
    if redis_bin is None:
        log("SKIPPED: redis-server is missing (apt-get install redis-server)")
        sys.exit(SKIP)
    with Cluster(*binaries, prefix="global_limits") as cluster:
        port = free_port()
        redis_argv = [redis_bin, "--port", str(port), "--bind", LOOPBACK, "--save", "",
                      "--appendonly", "no", "--dir", cluster.temp]

        def start_redis():
            process = cluster.start("redis", redis_argv)
            process.wait_for(r"Ready to accept connections")
            return process

        redis = start_redis()
        cluster.make_model()
        worker = cluster.start_worker("worker", "--max_num_seqs=16")
        keys = {name: f"sk-{name}-{os.getpid()}" for name in ("alice", "bob")}
        keys_file = os.path.join(cluster.temp, "api-keys")
        with open(keys_file, "w") as f:
            for name, key in keys.items():
                f.write(f"{name} {hashlib.sha256(key.encode()).hexdigest()}\n")
        common = [f"--api_keys_file={keys_file}", f"--redis_url=redis://{LOOPBACK}:{port}/0",
                  f"--rate_limit_rpm={RPM}", f"--token_quota_daily={QUOTA}",
                  "--redis_timeout=200ms"]
        a = cluster.start_gateway([worker], *common, "--redis_failure_policy=open", name="a")
        b = cluster.start_gateway([worker], *common, "--redis_failure_policy=closed", name="b")
        for gateway in (a, b):
            cluster.wait_ready(gateway, [worker])
            wait_until(f"{gateway.name} connected to Redis",
                       lambda g=gateway: metric(g, "llmserve_gateway_redis_up") == 1)
        summary = {}

        # 1. One key's limit across both replicas.
        align_to_minute()
        codes = [completion((a, b)[i % 2], keys["alice"]).status for i in range(30)]
        served = codes.count(200)
        expect(served == RPM and codes.count(429) == 30 - RPM,
               f"{served} of 30 served across two replicas with a limit of {RPM}: {codes}")
        refused = completion(a, keys["alice"])
        expect(refused.status == 429 and int(refused.headers.get("retry-after", "0")) >= 1,
               f"over the limit: {refused} {refused.headers}")
        expect("across all gateway replicas" in refused.text, refused.text)
        summary["per_minute"] = {"served": served, "refused": codes.count(429)}

        # 2. Bob's daily token quota: each request reserves and uses its prompt + 50 tokens.
        first = completion(a, keys["bob"], max_tokens=50, ignore_eos=True)
        expect(first.status == 200, f"bob's first request: {first}")
        per_request = first.json()["usage"]["total_tokens"]
        fit = QUOTA // per_request
        statuses = [first.status] + [
            completion((b, a)[i % 2], keys["bob"], max_tokens=50, ignore_eos=True).status
            for i in range(fit + 1)]
        expect(statuses.count(200) == fit,
               f"{statuses.count(200)} requests of {per_request} tokens served under a daily "
               f"quota of {QUOTA}, expected {fit}: {statuses}")
        over = completion(b, keys["bob"], max_tokens=50, ignore_eos=True)
        expect(over.status == 429 and "tokens per day" in over.text, f"over the quota: {over}")
        summary["daily_quota"] = {"tokens_per_request": per_request, "served": fit}

        # 3. Redis gone: open serves by its own limits, closed refuses at once.
        redis.signal(signal.SIGKILL)
        redis.wait(10)
        for gateway in (a, b):
            wait_until(f"{gateway.name} sees Redis gone",
                       lambda g=gateway: metric(g, "llmserve_gateway_redis_up") == 0)
        open_codes = [completion(a, keys["alice"]).status for _ in range(5)]
        expect(open_codes == [200] * 5, f"policy open with Redis down: {open_codes}")
        started = time.monotonic()
        closed = [completion(b, keys["alice"]) for _ in range(5)]
        closed_s = (time.monotonic() - started) / 5
        expect(all(r.status == 503 for r in closed), f"policy closed with Redis down: {closed}")
        expect("--redis_failure_policy=closed" in closed[0].text, closed[0].text)
        expect(closed_s < 1.0, f"a refusal took {closed_s:.3f} s: it must not wait for Redis")
        for gateway in (a, b):
            errors = metric(gateway, "llmserve_gateway_rate_limit_backend_errors_total")
            expect(errors and errors > 0, f"{gateway.name} counted no backend error")
        summary["redis_down"] = {"open": open_codes.count(200), "closed_503": len(closed),
                                 "closed_mean_s": round(closed_s, 4)}

        # 4. Back: both reconnect and the global limit holds again (the new Redis starts empty).
        start_redis()
        for gateway in (a, b):
            wait_until(f"{gateway.name} reconnected",
                       lambda g=gateway: metric(g, "llmserve_gateway_redis_up") == 1)
        align_to_minute()
        codes = [completion((a, b)[i % 2], keys["alice"]).status for i in range(30)]
        expect(codes.count(200) == RPM, f"after the restart: {codes.count(200)} served: {codes}")
        summary["after_restart"] = {"served": codes.count(200)}
        print(json.dumps(summary))


if __name__ == "__main__":
    sys.exit(run_binaries_test(run, "usage: global_rate_limit_test.py GATEWAY WORKER MAKE_MODEL"))
