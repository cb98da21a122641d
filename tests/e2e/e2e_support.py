"""What the end-to-end tests in tests/e2e share: the real binaries as child processes that never
outlive the test, loopback ports, readiness, HTTP (also raw bytes), Prometheus, raw protobuf and
gRPC helpers, and Failure. docs/testing.md describes the suites that use it.

    from e2e_support import Cluster, Failure

    with Cluster(gateway_bin, worker_bin, make_model_bin, "soak") as cluster:
        cluster.make_model()
        workers = [cluster.start_worker(f"worker-{i}", "--max_num_seqs=16") for i in range(2)]
        gateway = cluster.start_gateway(workers, "--allow_unauthenticated")
        cluster.wait_ready(gateway, workers)
        status, text = http_get(gateway.http_port, "/readyz")
    # every process is killed and the temporary folder removed here, however the block ended

Children never outlive the test, whatever ends it:
  - a normal return or an exception: Cluster / Processes kill what is still running on exit;
  - SIGTERM, SIGINT or SIGHUP (ctest's timeout, Ctrl-C): exit_on_signals() turns them into
    SystemExit, so the same cleanup runs;
  - the test process killed outright (SIGKILL): every child is started with PR_SET_PDEATHSIG,
    so the kernel kills it when the thread that started it dies. Start children from the main
    thread (a child started from a helper thread dies with that thread);
  - atexit kills whatever is still registered as a last resort.

Ports: a process started with port 0 picks its own, which is read back from its log (no race with
other tests); restarting a worker on the address it had passes that port explicitly.
"""

import atexit
import ctypes
import http.client
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time

SKIP = 77
LOOPBACK = "127.0.0.1"
# The longest any single wait in these tests may take.
PATIENCE_S = 60
# How many times slower than an optimized build the binaries run: make test-sanitize sets it
# (scripts/run-sanitized-tests.sh). A test whose work is sized in wall time divides that work, or
# multiplies its patience, by it (docs/building.md, "Sanitizers").
SANITIZER_SLOWDOWN = max(1, int(os.environ.get("LLMSERVE_SANITIZER_SLOWDOWN", "1")))

_PR_SET_PDEATHSIG = 1
# Resolved here, not in the child between fork and exec (where loading a library could deadlock
# on a lock another thread of the parent held at the fork).
_prctl = ctypes.CDLL(None, use_errno=True).prctl


class Failure(Exception):
    """A check failed; the message says what was expected and what was seen."""


def log(message):
    print(f"[{time.strftime('%H:%M:%S')}] {message}", flush=True)


def expect(condition, message):
    if not condition:
        raise Failure(message)


def die_with_parent():
    """preexec_fn: SIGKILL this child when the thread that started it dies (no orphans)."""
    _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def exit_on_signals():
    """SIGTERM, SIGINT and SIGHUP raise SystemExit(1) in the main thread, so that `finally`
    blocks and context managers kill the children before the test exits."""
    def handler(signum, frame):
        raise SystemExit(1)
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, handler)


def run_binaries_test(run, usage):
    """The whole of a test's main() for `TEST GATEWAY WORKER MAKE_MODEL`: runs run(binaries) and
    returns the exit status (0 ok, 1 a Failure, logged, 2 a wrong command line, with `usage`)."""
    exit_on_signals()
    if len(sys.argv) != 4:
        print(usage, file=sys.stderr)
        return 2
    try:
        run(sys.argv[1:4])
    except Failure as failure:
        log(f"FAILED: {failure}")
        return 1
    log("ok")
    return 0


def free_port(host=LOOPBACK):
    """A port free now on `host` (another process may take it before it is used: prefer port 0
    and the port a process logs when it can)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def rss_kb(pid):
    """Resident memory of `pid` (VmRSS of /proc/PID/status), in kB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise Failure(f"no VmRSS for pid {pid}")


def poll(condition, timeout_s, interval_s=0.1):
    """Calls `condition` until it returns a true value or `timeout_s` passes; its last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = condition()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(interval_s)


def wait_until(what, predicate, timeout_s=PATIENCE_S, interval_s=0.1, describe=lambda: ""):
    """Like poll, but a predicate that raises OSError / HTTPException counts as false, and
    Failure("expected WHAT within T s") when it never holds."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if predicate():
                return
        except (OSError, http.client.HTTPException):
            pass
        time.sleep(interval_s)
    detail = describe()
    raise Failure(f"expected {what} within {timeout_s} s" + (f"\n{detail}" if detail else ""))


# ---- processes ----------------------------------------------------------------------------------

_live = set()
_live_lock = threading.Lock()


@atexit.register
def _kill_leftovers():
    with _live_lock:
        leftovers = list(_live)
    for process in leftovers:
        process.stop()


class Process:
    """A child whose output goes to NAME.log in `log_dir` (tails go into failure messages);
    SIGKILLed by stop() at the latest."""

    def __init__(self, name, argv, log_dir, env=None):
        self.name = name
        self.argv = list(argv)
        self.log_path = os.path.join(log_dir, f"{name}.log")
        self._log = open(self.log_path, "wb")
        self.popen = subprocess.Popen(self.argv, stdout=self._log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, env=env,
                                      preexec_fn=die_with_parent)
        with _live_lock:
            _live.add(self)

    @property
    def pid(self):
        return self.popen.pid

    def running(self):
        return self.popen.poll() is None

    def output(self):
        with open(self.log_path, "r", encoding="utf-8", errors="replace") as f:
            return f.read()

    def tail(self, lines=20):
        return "\n".join(f"    {line}" for line in self.output().splitlines()[-lines:])

    def wait_for(self, pattern, timeout_s=PATIENCE_S):
        """The first match of `pattern` in the log, polled until it appears; Failure when the
        process exits or `timeout_s` passes first."""
        deadline = time.monotonic() + timeout_s
        while True:
            match = re.search(pattern, self.output())
            if match:
                return match
            if not self.running() or time.monotonic() > deadline:
                state = (f"exited with {self.popen.returncode}" if not self.running()
                         else f"still running after {timeout_s} s")
                raise Failure(f"{self.name}: expected a log line matching {pattern!r}, but it "
                              f"{state}; its log ends:\n{self.tail()}")
            time.sleep(0.05)

    def signal(self, signum):
        if self.running():
            self.popen.send_signal(signum)

    def wait(self, timeout_s):
        """The exit status, or None when still running after `timeout_s`."""
        try:
            return self.popen.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return None

    def rss_kb(self):
        return rss_kb(self.pid)

    def stop(self):
        """SIGKILL unless it has exited; reaps it and closes its log. Idempotent."""
        if self.popen.poll() is None:
            self.popen.kill()
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass
        self._log.close()
        with _live_lock:
            _live.discard(self)


class Processes:
    """Children by name, in start order; stop_all() (or leaving the `with`) kills them all."""

    def __init__(self, log_dir):
        self.log_dir = log_dir
        self.all = []  # every Process started, including stopped ones (their logs stay)

    def start(self, name, argv, env=None):
        process = Process(name, argv, self.log_dir, env)
        self.all.append(process)
        return process

    def __getitem__(self, name):
        """The latest process started under `name`."""
        for process in reversed(self.all):
            if process.name == name:
                return process
        raise KeyError(name)

    def stop(self, name):
        self[name].stop()

    def stop_all(self):
        for process in reversed(self.all):
            process.stop()

    def report(self, lines=20):
        """Each process's state and the end of its log, for a failure message."""
        parts = []
        for process in self.all:
            state = ("running" if process.running()
                     else f"exit code {process.popen.returncode}")
            parts.append(f"--- {process.name} ({state}), last lines of its log:\n"
                         f"{process.tail(lines)}")
        return "\n".join(parts)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop_all()
        return False


# ---- the stack ------------------------------------------------------------------------------------

class Worker:
    """A started llmserve-worker: its Process and where it listens."""

    def __init__(self, name, process, host, port, metrics_port):
        self.name = name
        self.process = process
        self.host = host
        self.port = port
        self.metrics_port = metrics_port

    @property
    def address(self):
        return f"{self.host}:{self.port}"

    def metrics(self):
        return scrape(self.metrics_port, self.host)


class Gateway:
    """A started llmserve-gateway: its Process and where it listens."""

    def __init__(self, name, process, host, grpc_port, http_port, metrics_port):
        self.name = name
        self.process = process
        self.host = host
        self.grpc_port = grpc_port
        self.http_port = http_port
        # /metrics is served here: --metrics_port when one was given, else the HTTP port.
        self.metrics_port = metrics_port

    def metrics(self):
        return scrape(self.metrics_port, self.host)

    def worker_up(self):
        """{worker address: 0 or 1} from llmserve_gateway_worker_up{worker=...}."""
        return {labels.get("worker"): value for labels, value in
                metric_samples(self.metrics(), "llmserve_gateway_worker_up")}


class Cluster(Processes):
    """A temporary folder, the tiny model generated into it, and workers and gateways on loopback.
    Leaving the `with` kills every process and removes the folder."""

    def __init__(self, gateway_bin, worker_bin, make_model_bin, prefix="e2e"):
        self.temp = tempfile.mkdtemp(prefix=f"llmserve_{prefix}_")
        super().__init__(self.temp)
        self.gateway_bin = gateway_bin
        self.worker_bin = worker_bin
        self.make_model_bin = make_model_bin
        self.model = os.path.join(self.temp, "tiny")

    def __exit__(self, *exc):
        self.stop_all()
        shutil.rmtree(self.temp, ignore_errors=True)
        return False

    def make_model(self, *flags):
        """Generates the tiny model (random weights, a real tokenizer) served as "tiny"."""
        subprocess.run([self.make_model_bin, "--preset=tiny", *flags, f"--out={self.model}"],
                       check=True, stdout=subprocess.DEVNULL, timeout=120)

    def start_worker(self, name, *flags, host=LOOPBACK, port=0, metrics_port=0):
        """A worker on the model, one kernel thread; waits until it serves (its log names its
        ports). `flags` come last and so override the defaults."""
        process = self.start(name, [
            self.worker_bin, f"--model={self.model}", "--served_model_name=tiny",
            f"--host={host}", f"--port={port}", f"--metrics_port={metrics_port}", "--threads=1",
            "--kv_cache_memory=32MiB", *flags])
        match = process.wait_for(
            rf"serving tiny on {re.escape(host)}:(\d+)"
            r"(?:, metrics on http://[^:]+:(\d+)/metrics|, no metrics server)")
        return Worker(name, process, host, int(match.group(1)),
                      int(match.group(2)) if match.group(2) else None)

    def start_gateway(self, workers, *flags, name="gateway", host=LOOPBACK, metrics_port=None,
                      env=None):
        """A gateway in front of `workers` (Worker objects or "host:port" strings), gRPC and HTTP
        on ports of its choosing; /metrics on `metrics_port` when given; `env` replaces the
        environment. Waits until it listens, not until it is ready (wait_ready)."""
        addresses = [w.address if isinstance(w, Worker) else w for w in workers]
        argv = [self.gateway_bin, f"--host={host}", "--grpc_port=0", "--http_port=0"]
        if addresses:
            argv.append("--workers=" + ",".join(addresses))
        if metrics_port is not None:
            argv.append(f"--metrics_port={metrics_port}")
        process = self.start(name, argv + list(flags), env)
        match = process.wait_for(r"gateway: gRPC on [^:]+:(\d+), HTTP on http://[^:]+:(\d+), auth")
        http_port = int(match.group(2))
        return Gateway(name, process, host, int(match.group(1)), http_port,
                       metrics_port if metrics_port is not None else http_port)

    def wait_ready(self, gateway, workers, timeout_s=PATIENCE_S):
        """Until the gateway's /readyz answers 200 and it lists every worker as up."""
        addresses = {w.address for w in workers}

        def ready():
            if http_get(gateway.http_port, "/readyz", host=gateway.host)[0] != 200:
                return False
            up = gateway.worker_up()
            return all(up.get(address) == 1 for address in addresses)

        wait_until(f"{gateway.name} ready with workers {sorted(addresses)}", ready, timeout_s,
                   describe=self.report)


# ---- HTTP -----------------------------------------------------------------------------------------

class HttpResult:
    """A response read whole: status, headers (names lower-cased), text, and how long it took
    from sending the request to its last byte."""

    def __init__(self, status, headers, text, seconds):
        self.status = status
        self.headers = headers
        self.text = text
        self.seconds = seconds

    def json(self):
        return json.loads(self.text)

    def __repr__(self):
        return f"HTTP {self.status} {self.text[:300]!r}"


def http_request(port, method, path, body=None, headers=None, timeout=30, host=LOOPBACK):
    """(status, body bytes) of one request on a fresh connection."""
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    try:
        connection.request(method, path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, response.read()
    finally:
        connection.close()


def http_get(port, path, timeout=10, host=LOOPBACK):
    """(status, text) of a GET."""
    status, body = http_request(port, "GET", path, timeout=timeout, host=host)
    return status, body.decode("utf-8", "replace")


def post_json(port, path, body, headers=None, timeout=PATIENCE_S, host=LOOPBACK):
    """An HttpResult for a JSON POST (`body` a dict, or a str sent as is)."""
    data = body if isinstance(body, (str, bytes)) else json.dumps(body)
    all_headers = {"Content-Type": "application/json"}
    all_headers.update(headers or {})
    connection = http.client.HTTPConnection(host, port, timeout=timeout)
    start = time.monotonic()
    try:
        connection.request("POST", path, data, all_headers)
        response = connection.getresponse()
        text = response.read().decode("utf-8", "replace")
        return HttpResult(response.status,
                          {name.lower(): value for name, value in response.getheaders()},
                          text, time.monotonic() - start)
    finally:
        connection.close()


def sse_events(text):
    """The data of each SSE event of a response body, in order ("[DONE]" included)."""
    events = []
    for block in text.split("\n\n"):
        block = block.strip()
        if block.startswith("data: "):
            events.append(block[len("data: "):])
        elif block:
            events.append(block)  # not a data event: kept so that checks see it
    return events


def error_message(text):
    """The message of an OpenAI error object ({"error": {"message": ...}}), or None."""
    try:
        error = json.loads(text).get("error")
    except (ValueError, AttributeError):
        return None
    return error.get("message") if isinstance(error, dict) else None


class RawResponse:
    """What raw_http read: the status (None when no response came), headers (names
    lower-cased), the body (de-chunked), whether the server closed the connection after it, and
    what went wrong, if anything."""

    def __init__(self):
        self.status = None
        self.headers = {}
        self.body = b""
        self.closed = False  # the server closed the connection after it
        self.error = None

    def text(self):
        return self.body.decode("utf-8", "replace")

    def __repr__(self):
        return (f"status={self.status} closed={self.closed} error={self.error} "
                f"body={self.body[:200]!r}")


def raw_http(port, data, timeout=10, host=LOOPBACK):
    """Sends `data` on a fresh connection, then reads one response (and whether the server
    closes after it). The send may fail once the server has answered and shut its side."""
    response = RawResponse()
    sock = socket.create_connection((host, port), timeout=timeout)
    try:
        try:
            sock.sendall(data)
        except OSError as error:  # refused early: the response may still be readable
            response.error = f"send: {error}"
        buffer = b""
        deadline = time.monotonic() + timeout

        def fill():
            nonlocal buffer
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                piece = sock.recv(65536)
            except socket.timeout:
                response.error = f"no complete response within {timeout} s: {buffer[:300]!r}"
                return False
            except ConnectionResetError:
                piece = b""
            if not piece:
                response.closed = True
                response.error = response.error or "closed"
            buffer += piece
            return bool(piece)

        while b"\r\n\r\n" not in buffer:
            if not fill():
                response.error = f"no response ({response.error})"
                return response
        head, buffer = buffer.split(b"\r\n\r\n", 1)
        lines = head.decode("latin-1").split("\r\n")
        response.status = int(lines[0].split(" ")[1])
        for line in lines[1:]:
            name, _, value = line.partition(":")
            response.headers[name.strip().lower()] = value.strip()
        if "content-length" in response.headers:
            length = int(response.headers["content-length"])
            while len(buffer) < length and fill():
                pass
            response.body = buffer[:length]
        elif response.headers.get("transfer-encoding") == "chunked":
            while not buffer.endswith(b"0\r\n\r\n") and fill():
                pass
            response.body = dechunk(buffer)
        else:
            while fill():
                pass
            response.body = buffer
        if response.headers.get("connection") == "close":
            sock.settimeout(3)
            try:
                response.closed = response.closed or sock.recv(1) == b""
            except (socket.timeout, ConnectionResetError):
                pass
        return response
    finally:
        sock.close()


def dechunk(data):
    parts, at = [], 0
    while at < len(data):
        eol = data.index(b"\r\n", at)
        size = int(data[at:eol].split(b";")[0], 16)
        if size == 0:
            break
        parts.append(data[eol + 2:eol + 2 + size])
        at = eol + 2 + size + 2
    return b"".join(parts)


# ---- Prometheus text ------------------------------------------------------------------------------

def scrape(port, host=LOOPBACK, timeout=10):
    status, text = http_get(port, "/metrics", timeout=timeout, host=host)
    if status != 200:
        raise Failure(f"{host}:{port}/metrics answered {status}")
    return text


_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{([^}]*)\})?\s+(\S+)", re.M)
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def metric_samples(text, name):
    """[(labels dict, value)] of every sample of metric `name`."""
    samples = []
    for match in _SAMPLE.finditer(text):
        if match.group(1) == name:
            labels = dict(_LABEL.findall(match.group(2) or ""))
            samples.append((labels, float(match.group(3))))
    return samples


def metric_values(text, name):
    """Values of every sample of metric `name` (any labels)."""
    return [value for _, value in metric_samples(text, name)]


def metric_sums(text):
    """{metric name: sum over its samples} of a whole page."""
    sums = {}
    for match in _SAMPLE.finditer(text):
        try:
            value = float(match.group(3))
        except ValueError:
            continue
        sums[match.group(1)] = sums.get(match.group(1), 0.0) + value
    return sums


def metric_sum(text, name):
    return sum(metric_values(text, name))


# ---- raw protobuf and gRPC ----------------------------------------------------------------------

def pb_varint(value):
    """A protobuf varint (negative int32/int64 as their 10-byte two's complement)."""
    if value < 0:
        value += 1 << 64
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def pb_field(number, value):
    """One field: int → varint, float → fixed32 (a float), bytes/str → length-delimited,
    list → each element as the same field (unpacked)."""
    import struct
    if isinstance(value, list):
        return b"".join(pb_field(number, v) for v in value)
    if isinstance(value, bool):
        value = int(value)
    if isinstance(value, int):
        return pb_varint(number << 3) + pb_varint(value)
    if isinstance(value, float):
        return pb_varint(number << 3 | 5) + struct.pack("<f", value)
    if isinstance(value, str):
        value = value.encode()
    return pb_varint(number << 3 | 2) + pb_varint(len(value)) + value


def pb_message(*fields):
    """A message from (number, value) pairs, in order."""
    return b"".join(pb_field(number, value) for number, value in fields)


def pb_parse(data):
    """[(field number, wire type, value)] of one message level: varints as ints, fixed32/64 as
    bytes, length-delimited as bytes. ValueError when malformed."""
    fields, i = [], 0

    def varint():
        nonlocal i
        shift, value = 0, 0
        while True:
            if i >= len(data) or shift > 63:
                raise ValueError("truncated varint")
            byte = data[i]
            i += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                return value

    while i < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        elif wire == 2:
            size = varint()
            value, i = data[i:i + size], i + size
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        if i > len(data):
            raise ValueError("truncated field")
        fields.append((number, wire, value))
    return fields


def grpc_channel(port, host=LOOPBACK, max_message_bytes=None):
    """An insecure grpcio channel (Debian's python3-grpcio; /usr/bin/python3)."""
    import grpc
    options = []
    if max_message_bytes is not None:
        options = [("grpc.max_send_message_length", max_message_bytes),
                   ("grpc.max_receive_message_length", max_message_bytes)]
    return grpc.insecure_channel(f"{host}:{port}", options=options)


def raw_unary(channel, method, request_bytes, timeout=30, metadata=None):
    """(status code, details, response bytes or None) of a unary call with raw bytes, through
    grpcio's generic API (identity serializers)."""
    import grpc
    call = channel.unary_unary(method, request_serializer=None, response_deserializer=None)
    try:
        return grpc.StatusCode.OK, "", call(request_bytes, timeout=timeout, metadata=metadata)
    except grpc.RpcError as error:
        return error.code(), error.details() or "", None


def raw_stream(channel, method, request_bytes, timeout=30, metadata=None):
    """(status code, details, [response bytes]) of a server-streaming call with raw bytes."""
    import grpc
    call = channel.unary_stream(method, request_serializer=None, response_deserializer=None)
    messages = []
    try:
        for message in call(request_bytes, timeout=timeout, metadata=metadata):
            messages.append(message)
        return grpc.StatusCode.OK, "", messages
    except grpc.RpcError as error:
        return error.code(), error.details() or "", messages


def have_grpcio():
    """Whether Debian's python3-grpcio can be imported (by /usr/bin/python3)."""
    import importlib.util
    return importlib.util.find_spec("grpc") is not None

