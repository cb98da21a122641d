#!/usr/bin/python3
"""Horizontal scaling by DNS, end to end, the way a Kubernetes headless Service does it.

Three real llmserve-worker processes listen on 127.0.0.2, 127.0.0.3 and 127.0.0.4 (all of 127/8
is loopback on Linux), on the same ports, like pods behind a headless Service. A real dnsmasq on
127.0.0.1:53 serves the A records of one name, workers.llmserve.test, from a hosts file it re-reads
when the file changes (inotify), and the real llmserve-gateway finds its workers only through
`--worker_dns=workers.llmserve.test:PORT --dns_refresh=1s` (getaddrinfo, as in production).

The test re-executes itself in fresh user, network and mount namespaces (unshare), so it owns
port 53 and /etc/resolv.conf, /etc/hosts and /etc/nsswitch.conf (bind-mounted) without root and
without touching the machine. Then:

  1. one record: every request lands on the first worker;
  2. scale out 1 -> 3 by adding two records: under load, all three workers serve requests soon
     after the refresh interval; requests sharing a long prompt prefix keep landing on the worker
     that caches it (its prefix-cache hits rise, the others' do not);
  3. scale in 3 -> 2: that worker's record is removed and it gets SIGTERM while streaming and
     non-streaming requests run (two long ones on it outlive the gateway's next DNS refresh, so
     the gateway drops it from its pool while they stream): every request gets 200 and a
     complete response, the drained worker exits 0, and afterwards traffic goes only to the
     remaining two (a new worker started on the removed address, but not in DNS, gets nothing);
  4. scale to zero and back: with every record removed the gateway lists no worker and answers
     503 saying the model has no worker now; one record added back serves again.

Per-worker request counts (from each worker's own Prometheus counters) are printed per phase.
About 20 s on two cores.

Usage: dns_scaling_test.py GATEWAY_BINARY WORKER_BINARY MAKE_MODEL_BINARY
Exit 0 on success, 77 (skipped) without unshare / user namespaces / dnsmasq, 1 on failure.
"""

import fcntl
import http.client
import json
import os
import random
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

from e2e_support import (SANITIZER_SLOWDOWN, SKIP, Failure, Processes, die_with_parent, expect,
                         log, metric_sums, poll)
from e2e_support import free_port as free_port_on
from e2e_support import http_get as http_get_on

NAME = "workers.llmserve.test"
ADDRESSES = ["127.0.0.2", "127.0.0.3", "127.0.0.4"]
INNER_ENV = "LLMSERVE_DNS_SCALING_INNER"
# The whole test, inside the namespaces; ctest's TIMEOUT is above it.
BUDGET_S = 240
PATIENCE_S = 60
# Generated tokens of the two requests still running on the removed worker when the gateway drops
# it from its pool: decode cost grows with the context, so 4000 tokens take seconds even on a fast
# machine, several times the DNS refresh. A sanitizer build decodes slower, but by less than its
# factor of 8 for the other tests: 500 tokens under ASan on an idle machine ended 0.7 s after the
# SIGTERM, before the gateway's next 1 s refresh (a failed CI run), so it gets half, not an
# eighth, and still drains within the 120 s.
LONG_TOKENS = 4000 // min(SANITIZER_SLOWDOWN, 2)



class Skip(Exception):
    pass


# --------------------------------------------------------------------------------------------
# Outside: check the tools, then run the test again inside fresh namespaces.


def outer(argv):
    missing = [tool for tool in ("unshare", "mount") if shutil.which(tool) is None]
    if missing:
        print(f"SKIP: {', '.join(missing)} not installed (util-linux)", file=sys.stderr)
        return SKIP
    if find_dnsmasq() is None:
        print("SKIP: dnsmasq not installed (Debian package dnsmasq-base)", file=sys.stderr)
        return SKIP
    unshare = [shutil.which("unshare"), "--user", "--map-root-user", "--net", "--mount"]
    probe = subprocess.run(unshare + ["true"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, timeout=30)
    if probe.returncode != 0:
        print(f"SKIP: cannot create user + network + mount namespaces (unshare: "
              f"{probe.stdout.strip()})", file=sys.stderr)
        return SKIP
    env = dict(os.environ, **{INNER_ENV: str(os.getpid())})
    inner_process = subprocess.Popen(unshare + [sys.executable, os.path.abspath(__file__)] + argv,
                                     env=env, preexec_fn=die_with_parent)
    try:
        code = inner_process.wait(timeout=BUDGET_S + 60)
    except subprocess.TimeoutExpired:
        inner_process.kill()
        inner_process.wait()
        print(f"FAIL: the test did not end within {BUDGET_S + 60} s", file=sys.stderr)
        return 1
    if code < 0:
        print(f"FAIL: the test was killed by signal {-code}", file=sys.stderr)
        return 1
    return code


def find_dnsmasq():
    return shutil.which("dnsmasq") or next(
        (path for path in ("/usr/sbin/dnsmasq", "/sbin/dnsmasq") if os.access(path, os.X_OK)),
        None)


# --------------------------------------------------------------------------------------------
# Processes, logs, metrics.


def http_get(host, port, path, timeout=5):
    return http_get_on(port, path, timeout=timeout, host=host)


class WorkerStats:
    """What a worker's /metrics says about the requests it served."""

    COUNTERS = {"requests": "llmserve_request_success_total",
                "refused": "llmserve_request_failure_total",
                "hits": "llmserve_prefix_cache_hits_total",
                "queries": "llmserve_prefix_cache_queries_total"}
    GAUGES = {"running": "llmserve_num_requests_running",
              "waiting": "llmserve_num_requests_waiting"}

    def __init__(self, sums):
        for field, metric in {**self.COUNTERS, **self.GAUGES}.items():
            setattr(self, field, int(sums.get(metric, 0)))

    def minus(self, earlier):
        """Counters since `earlier`."""
        delta = WorkerStats({})
        for field in self.COUNTERS:
            setattr(delta, field, getattr(self, field) - getattr(earlier, field))
        return delta

    def as_dict(self):
        return {field: getattr(self, field) for field in self.COUNTERS}


# --------------------------------------------------------------------------------------------
# The client: the gateway's OpenAI HTTP API, a fresh connection per request.


def complete(port, prompt, max_tokens, stream, timeout=PATIENCE_S):
    """Sends one /v1/completions request; returns (ok, detail, prompt_tokens)."""
    body = {"model": "tiny", "prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
            "temperature": 0}
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    kind = "streaming" if stream else "non-streaming"
    connection = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
    try:
        connection.request("POST", "/v1/completions", json.dumps(body),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        status = response.status
        text = response.read().decode("utf-8", "replace")
    except (OSError, http.client.HTTPException) as error:
        return False, f"{kind} request: {type(error).__name__}: {error}", 0
    finally:
        connection.close()
    if status != 200:
        return False, f"{kind} request: expected HTTP 200, got {status}: {text[:300]}", 0
    try:
        if stream:
            events = [event.strip() for event in text.split("\n\n") if event.strip()]
            if not events or events[-1] != "data: [DONE]":
                return False, (f"streaming request: expected the stream to end with "
                               f"'data: [DONE]', it ended with {events[-1:]!r}"), 0
            finish, usage = None, None
            for event in events[:-1]:
                if not event.startswith("data: "):
                    return False, f"streaming request: not an SSE data event: {event[:200]!r}", 0
                chunk = json.loads(event[len("data: "):])
                if "error" in chunk:
                    return False, f"streaming request: error event {chunk['error']}", 0
                for choice in chunk.get("choices") or []:
                    finish = choice.get("finish_reason") or finish
                usage = chunk.get("usage") or usage
        else:
            answer = json.loads(text)
            finish = answer["choices"][0]["finish_reason"]
            usage = answer.get("usage")
    except (ValueError, KeyError, IndexError, TypeError) as error:
        return False, f"{kind} request: unreadable answer ({error}): {text[:300]!r}", 0
    if finish != "length" or usage is None or usage.get("completion_tokens") != max_tokens:
        return False, (f"{kind} request: expected finish_reason 'length' after {max_tokens} "
                       f"tokens, got {finish!r} with usage {usage}"), 0
    return True, "", usage.get("prompt_tokens", 0)


WORDS = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike "
         "november oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee "
         "zulu").split()


def random_prompt(rng):
    """A prompt that shares no full KV block with any other: it starts with random hex."""
    return f"{rng.getrandbits(64):016x} " + " ".join(rng.choice(WORDS) for _ in range(12))


def shared_prefix():
    """A long prompt prefix (hundreds of tokens: many full 16-token blocks)."""
    rng = random.Random(14)
    return ("You are the operator's assistant. Context follows. "
            + " ".join(rng.choice(WORDS) for _ in range(160)) + ". Question: ")


class Load:
    """`threads` clients sending requests back to back until stopped (or `per_thread` each);
    every result is kept."""

    def __init__(self, port, threads, make_request, name, per_thread=None, timeout=PATIENCE_S):
        self.port = port
        self.make_request = make_request  # (thread index, request index) -> (prompt, n, stream)
        self.name = name
        self.per_thread = per_thread
        self.timeout = timeout
        self.results = []  # (ok, detail, t_start, t_end)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(index,), daemon=True)
                         for index in range(threads)]

    def start(self):
        for thread in self._threads:
            thread.start()
        return self

    def _run(self, index):
        count = 0
        while not self._stop.is_set() and count != self.per_thread:
            prompt, max_tokens, stream = self.make_request(index, count)
            count += 1
            start = time.monotonic()
            ok, detail, _ = complete(self.port, prompt, max_tokens, stream, self.timeout)
            with self._lock:
                self.results.append((ok, detail, start, time.monotonic()))

    def completed(self):
        with self._lock:
            return len(self.results)

    def stop(self):
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout + 10)
            if thread.is_alive():
                raise Failure(f"{self.name}: a client thread is still waiting for an answer "
                                  f"{self.timeout + 10} s after the load stopped")
        with self._lock:
            return list(self.results)


# --------------------------------------------------------------------------------------------
# Inside the namespaces.


def bring_loopback_up():
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        request = struct.pack("16sH22x", b"lo", 0)
        flags = struct.unpack("16sH22x", fcntl.ioctl(sock, 0x8913, request))[1]  # SIOCGIFFLAGS
        fcntl.ioctl(sock, 0x8914, struct.pack("16sH22x", b"lo", flags | 1))  # SIOCSIFFLAGS, IFF_UP
    finally:
        sock.close()


def bind_mount(source, target):
    result = subprocess.run(["mount", "--bind", source, target], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    if result.returncode != 0:
        raise Skip(f"cannot bind-mount {source} over {target}: {result.stdout.strip()}")


def take_over_name_resolution(temp):
    """This mount namespace's glibc asks 127.0.0.1:53 for every name not in a tiny /etc/hosts."""
    files = {
        "resolv.conf": "nameserver 127.0.0.1\noptions timeout:1 attempts:2\n",
        "hosts": "127.0.0.1 localhost\n",
        # No nss-resolve / mdns / myhostname module in the way: files, then DNS.
        "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
    }
    for name, content in files.items():
        if not os.path.exists(f"/etc/{name}"):
            continue  # glibc's defaults: nameserver 127.0.0.1, hosts from DNS
        path = os.path.join(temp, name)
        with open(path, "w") as f:
            f.write(content)
        bind_mount(path, f"/etc/{name}")
    # A host nscd would answer from outside the namespace.
    for nscd in ("/run/nscd", "/var/run/nscd"):
        if os.path.isdir(nscd):
            empty = os.path.join(temp, "no-nscd")
            os.makedirs(empty, exist_ok=True)
            bind_mount(empty, nscd)


def resolve(name, port=80):
    try:
        answers = socket.getaddrinfo(name, port, type=socket.SOCK_STREAM)
    except socket.gaierror:
        return []
    return sorted({answer[4][0] for answer in answers})


def free_port(host):
    return free_port_on(host)


class Stack:
    """dnsmasq, three workers and the gateway, each a Process; close() ends them all."""

    def __init__(self, binaries, temp):
        self.gateway_binary, self.worker_binary, self.make_model = binaries
        self.temp = temp
        self.logs = os.path.join(temp, "logs")
        self.hostsdir = os.path.join(temp, "dns")
        os.makedirs(self.logs)
        os.makedirs(self.hostsdir)
        self.processes = Processes(self.logs)
        self.workers = {}  # address -> Process
        self.dnsmasq = None
        self.gateway = None
        self.http_port = None
        self.model = os.path.join(temp, "tiny")
        self.worker_port = free_port(ADDRESSES[0])
        self.metrics_port = free_port(ADDRESSES[0])
        while self.metrics_port == self.worker_port:
            self.metrics_port = free_port(ADDRESSES[0])

    def start(self, name, argv):
        return self.processes.start(name, argv)

    def close(self):
        self.processes.stop_all()

    def logs_report(self):
        return self.processes.report(25)

    # DNS.

    def start_dns(self, addresses):
        self.set_records(addresses, wait=False)
        self.dnsmasq = self.start("dnsmasq", [
            # --no-daemon: in the foreground, logging to stderr, no pid file, no user change.
            find_dnsmasq(), "--no-daemon", "--no-resolv", "--no-hosts",
            "--listen-address=127.0.0.1", "--bind-interfaces", "--port=53",
            # Answers are never cached downstream; NXDOMAIN / NODATA (not REFUSED) for names and
            # record types it does not have, so getaddrinfo gets a clean answer.
            "--local-ttl=0", "--neg-ttl=0", "--local=/llmserve.test/",
            # Re-read on every change (inotify): how a cluster DNS follows endpoints.
            f"--hostsdir={self.hostsdir}", "--log-queries"])
        self.wait_for_records(addresses)

    def set_records(self, addresses, wait=True):
        """Replaces the name's A records atomically: written outside hostsdir, then renamed in
        (dnsmasq would keep serving the names of a staging file renamed out of hostsdir)."""
        staging = os.path.join(self.temp, "records.tmp")
        with open(staging, "w") as f:
            f.writelines(f"{address} {NAME}\n" for address in addresses)
        os.replace(staging, os.path.join(self.hostsdir, "workers"))
        if wait:
            self.wait_for_records(addresses)

    def wait_for_records(self, addresses):
        deadline = time.monotonic() + 20
        while resolve(NAME) != sorted(addresses):
            if time.monotonic() > deadline:
                raise Failure(f"dnsmasq: expected {NAME} to resolve to {sorted(addresses)} "
                                  f"within 20 s, it resolves to {resolve(NAME)}")
            if self.dnsmasq.popen.poll() is not None:
                raise Failure(f"dnsmasq exited with {self.dnsmasq.popen.returncode}")
            time.sleep(0.05)

    # Workers and gateway.

    def make_model_dir(self):
        subprocess.run([self.make_model, "--preset=tiny", "--max_position_embeddings=8192",
                        f"--out={self.model}"], check=True, stdout=subprocess.DEVNULL,
                       timeout=PATIENCE_S)

    def start_worker(self, address, name=None):
        process = self.start(name or f"worker-{address}", [
            self.worker_binary, f"--model={self.model}", "--served_model_name=tiny",
            f"--host={address}", f"--port={self.worker_port}",
            f"--metrics_port={self.metrics_port}", "--threads=1", "--kv_cache_memory=32MiB",
            "--drain_timeout=120s"])
        self.workers[address] = process
        return process

    def wait_worker_ready(self, address):
        self.workers[address].wait_for(
            rf"serving tiny on {re.escape(address)}:{self.worker_port}\b")

    def start_gateway(self):
        self.gateway = self.start("gateway", [
            self.gateway_binary, "--host=127.0.0.1", "--grpc_port=0", "--http_port=0",
            f"--worker_dns={NAME}:{self.worker_port}", "--dns_refresh=1s", "--routing=prefix",
            "--max_attempts=3"])
        self.gateway.wait_for(r"gateway: ready")
        self.http_port = int(self.gateway.wait_for(r"HTTP on http://127\.0\.0\.1:(\d+)").group(1))

    def stats(self, address):
        status, text = http_get(address, self.metrics_port, "/metrics")
        if status != 200:
            raise Failure(f"worker {address}: /metrics answered {status}")
        return WorkerStats(metric_sums(text))

    def all_stats(self, addresses):
        return {address: self.stats(address) for address in addresses}

    def gateway_workers(self):
        """{address: up} of the workers in the gateway's pool, from its
        llmserve_gateway_worker_up{worker} series (None when it exports no such metric)."""
        status, text = http_get("127.0.0.1", self.http_port, "/metrics")
        if status != 200 or "llmserve_gateway_worker_up" not in text:
            return None
        return {match.group(1): float(match.group(2)) for match in re.finditer(
            r'^llmserve_gateway_worker_up\{[^}]*worker="([^"]+)"[^}]*\}\s+(\S+)', text, re.M)}


def check_results(results, phase):
    failures = [detail for ok, detail, _, _ in results if not ok]
    expect(not failures, f"{phase}: expected every request to get 200 and a complete response; "
                         f"{len(failures)} of {len(results)} did not, e.g.:\n  "
                         + "\n  ".join(failures[:5]))


def print_table(table, addresses):
    phases = list(table)
    width = max(len(phase) for phase in phases) + 2
    log("requests served per worker (from each worker's llmserve_request_success_total; "
        "hits: prefix-cache hit tokens):")
    print("    " + "phase".ljust(width) + "".join(a.rjust(18) for a in addresses), flush=True)
    for phase in phases:
        cells = []
        for address in addresses:
            cell = table[phase].get(address)
            if cell is None:
                cells.append("-")
            else:
                hits = f" ({cell['hits']} hits)" if cell["hits"] else ""
                cells.append(f"{cell['requests']}{hits}")
        print("    " + phase.ljust(width) + "".join(c.rjust(18) for c in cells), flush=True)
    print("DNS_SCALING_RESULT " + json.dumps(table, sort_keys=True), flush=True)


class Requests:
    """Request factories for Load: (thread index, request index) -> (prompt, max_tokens, stream),
    half of them streaming."""

    def __init__(self):
        self._rng = random.Random(os.getpid())
        self._lock = threading.Lock()
        self.prefix = shared_prefix()

    def distinct(self, max_tokens):
        def make(thread_index, count):
            with self._lock:
                return (random_prompt(self._rng), self._rng.randint(*max_tokens),
                        (thread_index + count) % 2 == 0)
        return make

    def long(self):
        """The shared prefix (so routed to the worker caching it), LONG_TOKENS generated, one
        streaming and one not."""
        def make(thread_index, count):
            return self.prefix + f"long {thread_index}", LONG_TOKENS, thread_index == 0
        return make

    def mixed(self, max_tokens):
        """Even threads send the shared prefix, odd ones distinct prompts."""
        distinct = self.distinct(max_tokens)

        def make(thread_index, count):
            if thread_index % 2:
                return distinct(thread_index, count)
            with self._lock:
                return (self.prefix + f"load {thread_index}.{count}",
                        self._rng.randint(*max_tokens), count % 2 == 0)
        return make


def record(table, phase, stack, before, addresses=ADDRESSES):
    """Counters of `addresses` since `before`, stored in the table under `phase`."""
    now = stack.all_stats(addresses)
    delta = {x: now[x].minus(before[x]) for x in addresses}
    table[phase] = {x: d.as_dict() for x, d in delta.items()}
    return delta


def start_stack(stack):
    """DNS with one record; three workers (two not yet in DNS, like pods not yet ready); the
    gateway."""
    stack.start_dns(ADDRESSES[:1])
    stack.make_model_dir()
    for address in ADDRESSES:
        stack.start_worker(address)
    for address in ADDRESSES:
        stack.wait_worker_ready(address)
    stack.start_gateway()
    log(f"dnsmasq serves {NAME} -> {resolve(NAME)}; workers on {', '.join(ADDRESSES)} port "
        f"{stack.worker_port} (metrics {stack.metrics_port}); gateway HTTP port "
        f"{stack.http_port} with --worker_dns={NAME}:{stack.worker_port} --dns_refresh=1s")


def one_worker(stack, table, requests):
    a, b, c = ADDRESSES
    before = stack.all_stats(ADDRESSES)
    load = Load(stack.http_port, 3, requests.distinct((150, 400)), "one worker").start()
    poll(lambda: load.completed() >= 12, PATIENCE_S)
    results = load.stop()
    check_results(results, "one worker")
    delta = record(table, "1 worker", stack, before)
    expect(delta[a].requests == len(results) and delta[b].requests == 0 and
           delta[c].requests == 0,
           f"one worker: expected all {len(results)} requests on {a} (the only address in DNS), "
           f"got {table['1 worker']}")


def scale_out(stack, table, requests):
    """1 -> 3 by adding two records: the gateway lists them within the refresh interval and
    all three serve requests under load."""
    before = stack.all_stats(ADDRESSES)
    stack.set_records(ADDRESSES)
    changed = time.monotonic()
    log(f"scale out: {NAME} -> {resolve(NAME)}")

    def gateway_lists_all():
        up = stack.gateway_workers()
        return up is None or all(up.get(f"{x}:{stack.worker_port}") == 1 for x in ADDRESSES)

    seen = poll(gateway_lists_all, 30, 0.05)
    listed = stack.gateway_workers()
    if listed is None:
        log("the gateway exports no llmserve_gateway_worker_up{worker}: its view of the workers "
            "is not checked, only where requests land")
    else:
        expect(seen, f"scale out: expected the gateway to list {ADDRESSES} as up within 30 s of "
                     f"the DNS change (refresh 1 s), it lists {listed}")
        log(f"scale out: the gateway lists all three workers as up "
            f"{time.monotonic() - changed:.1f} s after the DNS change")
    first_traffic = {}
    load = Load(stack.http_port, 6, requests.distinct((300, 700)), "scale out").start()

    def all_three_served():
        now = stack.all_stats(ADDRESSES)
        for x in ADDRESSES:
            if now[x].requests > before[x].requests and x not in first_traffic:
                first_traffic[x] = time.monotonic() - changed
        return all(now[x].requests - before[x].requests >= 3 for x in ADDRESSES)

    served = poll(all_three_served, PATIENCE_S, 0.2)
    results = load.stop()
    check_results(results, "scale out")
    record(table, "scale out to 3", stack, before)
    expect(served, f"scale out: expected each of the three workers to serve at least 3 requests "
                   f"under load (6 clients) within {PATIENCE_S} s of the DNS change, got "
                   f"{table['scale out to 3']}")
    log("scale out: first request served by each worker after the DNS change: "
        + ", ".join(f"{x} {first_traffic.get(x, float('nan')):.1f} s" for x in ADDRESSES)
        + f" ({len(results)} requests)")


def prefix_affinity(stack, table, requests):
    """Requests sharing a long prefix keep landing on the worker that caches it (its prefix-cache
    hits rise, the others' do not) while other clients' requests spread. Returns that worker."""
    before = stack.all_stats(ADDRESSES)
    ok, detail, prompt_tokens = complete(stack.http_port, requests.prefix + "question 0", 8,
                                         False)
    expect(ok, f"prefix: the first request failed: {detail}")
    after = stack.all_stats(ADDRESSES)
    holders = [x for x in ADDRESSES if after[x].requests > before[x].requests]
    expect(len(holders) == 1, f"prefix: expected one worker to serve the first request, got "
                              f"{ {x: after[x].minus(before[x]).as_dict() for x in ADDRESSES} }")
    holder = holders[0]
    full_blocks = prompt_tokens // 16 - 1  # the suffix may retokenize the prefix's last block
    expect(full_blocks >= 10, f"prefix: expected a prefix of many blocks, the prompt has "
                              f"{prompt_tokens} tokens")
    # The holder's next load report (every 200 ms) tells the gateway what it caches.
    time.sleep(1.0)
    background = Load(stack.http_port, 2, requests.distinct((150, 400)),
                      "prefix background").start()
    prefix_requests = 8
    for index in range(1, prefix_requests + 1):
        ok, detail, _ = complete(stack.http_port, requests.prefix + f"question {index}", 16,
                                 index % 2 == 0)
        expect(ok, f"prefix: request {index} failed: {detail}")
    results = background.stop()
    check_results(results, "prefix background")
    delta = record(table, "shared prefix", stack, before)
    want_hits = prefix_requests * full_blocks * 16
    others = [x for x in ADDRESSES if x != holder]
    expect(delta[holder].hits >= want_hits and
           all(delta[x].hits < full_blocks * 16 for x in others),
           f"prefix: expected the {prefix_requests} requests sharing a {prompt_tokens}-token "
           f"prefix to hit the cache of {holder} (>= {want_hits} hit tokens there, less than one "
           f"request's worth elsewhere) while 2 clients sent other prompts; got "
           f"{table['shared prefix']}")
    log(f"prefix: {holder} holds the {prompt_tokens}-token prefix; {prefix_requests} more "
        f"requests sharing it gave {delta[holder].hits} hit tokens there, "
        + ", ".join(f"{delta[x].hits} on {x}" for x in others)
        + f" ({len(results)} background requests; requests per worker: "
        + ", ".join(f"{x}: {delta[x].requests}" for x in ADDRESSES) + ")")
    return holder


def scale_in(stack, table, requests, victim):
    """3 -> 2 under load: `victim` leaves DNS and gets SIGTERM; no request is lost, it drains and
    exits 0, the gateway forgets it (while two long requests still run on it)."""
    remaining = [x for x in ADDRESSES if x != victim]
    victim_key = f"{victim}:{stack.worker_port}"
    before = stack.all_stats(ADDRESSES)
    # Two long requests on the victim (it caches their prefix), then the load: half of it with the
    # prefix too, which keeps the victim busy.
    long_requests = Load(stack.http_port, 2, requests.long(), "long requests", per_thread=1,
                         timeout=PATIENCE_S * 2).start()
    expect(poll(lambda: stack.stats(victim).running >= 2, PATIENCE_S, 0.05),
           f"scale in: expected the two long requests sharing the prefix to run on {victim}, "
           f"its metrics say {stack.stats(victim).__dict__}")
    load = Load(stack.http_port, 6, requests.mixed((300, 600)), "scale in").start()
    poll(lambda: load.completed() >= 6, PATIENCE_S)
    completed = load.completed()
    stack.set_records(remaining, wait=False)
    stack.workers[victim].popen.send_signal(signal.SIGTERM)
    signalled = time.monotonic()
    log(f"scale in: removed {victim} from {NAME} and sent it SIGTERM under load "
        f"({completed} requests completed so far, 2 long ones running on it)")
    # Its metrics are read until it stops answering: it admits nothing once draining, and every
    # request running or waiting then finishes, so the last page plus those is its final count.
    # Meanwhile: when does the gateway stop listing it, and is it still serving requests then?
    last_victim = before[victim]
    dropped, running_when_dropped = None, None
    deadline = time.monotonic() + PATIENCE_S * 2
    while stack.workers[victim].popen.poll() is None and time.monotonic() < deadline:
        try:
            last_victim = stack.stats(victim)
        except (OSError, http.client.HTTPException, Failure):
            pass
        listed = stack.gateway_workers()
        if dropped is None and listed is not None and victim_key not in listed:
            dropped = time.monotonic() - signalled
            running_when_dropped = last_victim.running
        time.sleep(0.05)
    code = stack.workers[victim].popen.poll()
    expect(code == 0, f"scale in: expected {victim} to drain and exit 0 after SIGTERM, it "
                      + (f"is still running after {PATIENCE_S * 2} s" if code is None
                         else f"exited with {code}"))
    exited = time.monotonic()
    drained = re.search(r"draining: (\d+) requests running", stack.workers[victim].output())
    expect(drained and int(drained.group(1)) >= 2,
           f"scale in: expected {victim} to have at least the 2 long requests running when it got "
           f"SIGTERM (its log says {drained.group(0) if drained else 'nothing about draining'})")
    # The load goes on without it for a while.
    at_exit = load.completed()
    poll(lambda: load.completed() >= at_exit + 12, PATIENCE_S)
    results = load.stop()
    long_results = long_requests.stop()
    check_results(long_results, "scale in (the long requests on the removed worker)")
    check_results(results, "scale in")
    delta = record(table, "scale in to 2", stack, before, remaining)
    delta[victim] = last_victim.minus(before[victim])
    delta[victim].requests += last_victim.running + last_victim.waiting
    table["scale in to 2"][victim] = delta[victim].as_dict()
    log(f"scale in: {victim} drained {drained.group(1)} running requests and exited 0 "
        f"{exited - signalled:.1f} s after SIGTERM; requests it refused while draining (each "
        f"retried elsewhere by the gateway): {delta[victim].refused}; "
        f"{len(results) + len(long_results)} requests through the gateway, all 200 and complete")
    expect(all(delta[x].requests > 0 for x in remaining),
           f"scale in: expected both remaining workers to serve requests, got "
           f"{table['scale in to 2']}")
    if stack.gateway_workers() is None:
        return
    expect(dropped is not None and running_when_dropped,
           f"scale in: expected the gateway to drop {victim} from its workers about 1 s (the DNS "
           f"refresh) after its record was removed, while the long requests still ran on it; "
           + ("it still listed it when the worker exited" if dropped is None else
              f"it dropped it after {dropped:.1f} s, when the worker ran "
              f"{running_when_dropped} requests"))
    log(f"scale in: the gateway dropped {victim} {dropped:.1f} s after the DNS change, while "
        f"{running_when_dropped} requests still ran on it; they completed")


def after_scale_in(stack, table, requests, victim):
    """Traffic goes only to the two workers in DNS: a new worker on the removed address (not in
    DNS, like a pod outside the Service) gets nothing."""
    remaining = [x for x in ADDRESSES if x != victim]
    stack.start_worker(victim, name=f"worker-{victim}-restarted")
    stack.wait_worker_ready(victim)
    before = stack.all_stats(ADDRESSES)
    load = Load(stack.http_port, 4, requests.distinct((150, 400)), "after scale in").start()
    time.sleep(4.0)  # longer than the gateway's first re-probe backoffs of a worker it still knew
    poll(lambda: load.completed() >= 12, PATIENCE_S)
    results = load.stop()
    check_results(results, "after scale in")
    delta = record(table, "after (2 in DNS)", stack, before)
    expect(delta[victim].requests == 0 and
           sum(delta[x].requests for x in remaining) == len(results),
           f"after scale in: expected all {len(results)} requests on {remaining} (in DNS) and "
           f"none on {victim} (removed from DNS, restarted), got {table['after (2 in DNS)']}")


def scale_to_zero_and_back(stack, table, requests):
    """Every record removed (a group scaled to zero): requests get 503 naming the model as gone
    for now, not 'no worker has answered yet'; a record added back serves again."""
    stack.set_records([])
    expect(poll(lambda: not stack.gateway_workers(), PATIENCE_S),
           f"scaled to zero: the gateway still lists {stack.gateway_workers()}")
    log("scale to zero: the gateway lists no worker")
    connection = http.client.HTTPConnection("127.0.0.1", stack.http_port, timeout=PATIENCE_S)
    try:
        connection.request("POST", "/v1/completions",
                           json.dumps({"model": "tiny", "prompt": "x", "max_tokens": 2}),
                           {"Content-Type": "application/json"})
        response = connection.getresponse()
        status, text = response.status, response.read().decode("utf-8", "replace")
    finally:
        connection.close()
    expect(status == 503 and "no worker is available now for tiny" in text,
           f"scaled to zero: expected 503 saying no worker is available now for tiny, got "
           f"{status}: {text[:300]}")
    address = ADDRESSES[0]
    stack.set_records([address])
    expect(poll(lambda: (stack.gateway_workers() or {}).get(f"{address}:{stack.worker_port}") ==
                1.0, PATIENCE_S),
           f"scaled back to one: the gateway does not list {address} as up within "
           f"{PATIENCE_S} s: {stack.gateway_workers()}")
    log(f"scale back to one: the gateway lists {address} as up")
    before = stack.all_stats([address])
    ok, detail, _ = complete(stack.http_port, "back again", 4, stream=False)
    expect(ok, f"scaled back to one: {detail}")
    record(table, "zero, then 1 again", stack, before, addresses=[address])


def run_test(stack, table):
    requests = Requests()
    start_stack(stack)
    one_worker(stack, table, requests)
    scale_out(stack, table, requests)
    holder = prefix_affinity(stack, table, requests)
    scale_in(stack, table, requests, victim=holder)
    after_scale_in(stack, table, requests, victim=holder)
    scale_to_zero_and_back(stack, table, requests)
    print_table(table, ADDRESSES)


def over_budget(signum, frame):
    raise Failure(f"the test ran past its budget of {BUDGET_S} s")


def inner(argv):
    # The outer test process may be killed (ctest timeout): go with it.
    die_with_parent()
    if os.getppid() != int(os.environ[INNER_ENV]):
        return 1
    binaries = argv[:3]
    started = time.monotonic()
    try:
        bring_loopback_up()
    except OSError as error:
        print(f"SKIP: cannot bring up loopback in the network namespace: {error}", file=sys.stderr)
        return SKIP
    with tempfile.TemporaryDirectory(prefix="llmserve_dns_scaling_") as temp:
        try:
            take_over_name_resolution(temp)
        except Skip as skip:
            print(f"SKIP: {skip}", file=sys.stderr)
            return SKIP
        stack = Stack(binaries, temp)
        table = {}  # phase -> address -> counters, filled as phases pass
        signal.signal(signal.SIGALRM, over_budget)
        signal.alarm(BUDGET_S)
        try:
            run_test(stack, table)
        except (Failure, subprocess.SubprocessError, OSError) as error:
            if table:
                print_table(table, ADDRESSES)
            print(f"FAIL: {error}\n{stack.logs_report()}", file=sys.stderr, flush=True)
            return 1
        finally:
            signal.alarm(0)
            stack.close()
    log(f"PASS in {time.monotonic() - started:.1f} s")
    return 0


def main():
    argv = sys.argv[1:]
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    if os.environ.get(INNER_ENV):
        return inner(argv)
    return outer(argv)


if __name__ == "__main__":
    sys.exit(main())
