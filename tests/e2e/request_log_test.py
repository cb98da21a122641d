#!/usr/bin/python3
"""The request log against a real PostgreSQL server (Debian's), started by this test.

initdb in a temporary folder (as an unprivileged user when the test runs as root), the server on
a random loopback port with password (SCRAM) authentication; the gateway gets the URL without
the password and the password in PGPASSWORD, as docs/operations.md tells operators to do. A
worker on the tiny model and a gateway with API keys and HS256 JWTs serve 2,000 mixed requests
(completions, chats, streams, unknown models, bad keys, bad requests, clients that leave):

  1. with the database up: every request becomes one row with the right fields (request id,
     principal, model, endpoint, status, tokens as the response reported them);
    2. the database crashes (immediate shutdown) under load: serving goes on, every request gets
     its answer; beyond --request_log_queue records are dropped and counted;
  3. the database restarts: the backlog goes in at the writer's next retry, then new rows follow, and in the end rows + dropped = requests, no record
     twice, and the metrics agree with the table.

SQL injection shapes in model names and JWT subjects are stored verbatim; with
--request_log_content each completion's and chat's prompt and output text are in its row. Prints a
JSON summary.

Usage: request_log_test.py GATEWAY WORKER MAKE_MODEL
Exit 0 on success, 77 (skipped) when PostgreSQL's server or psql is missing, 1 on failure.
"""

import base64
import concurrent.futures
import glob
import hashlib
import hmac
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

from e2e_support import (LOOPBACK, SANITIZER_SLOWDOWN, SKIP, Cluster, Failure, expect,
                         free_port, log, metric_samples, post_json, run_binaries_test,
                         sse_events, wait_until)

# --request_log_queue; the outage sees 4 times as many requests, so that some must be dropped.
# (250: a healthy database keeps up with the load below even on a loaded 2-core machine, where 100
# was seen to overflow.)
QUEUE = max(25, 250 // SANITIZER_SLOWDOWN)
# Requests per phase: database up, down, up again (2,000 in all; fewer under sanitizers).
PHASES = {"up": max(100, 600 // SANITIZER_SLOWDOWN), "down": 4 * QUEUE,
          "restarted": max(100, 400 // SANITIZER_SLOWDOWN)}
# Client threads while the database is up: the writer must keep up with them.
UP_THREADS = 4
HOSTILE_MODELS = [
    "tiny'); DROP TABLE llmserve_request_log; --",
    "\"; DELETE FROM llmserve_request_log WHERE ''='",
    "$1, $2) -- \\x00 \u00e9\u4e2d",
]
HOSTILE_SUBJECT = "bob'); DROP TABLE llmserve_schema_migrations; --"
SECRET = "request-log-test-secret-0123456789abcdef"


def find_postgres():
    """(bin dir of initdb/postgres, psql) or None."""
    psql = shutil.which("psql")
    for bin_dir in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if all(os.access(os.path.join(bin_dir, b), os.X_OK) for b in ("initdb", "postgres")):
            return bin_dir, psql or os.path.join(bin_dir, "psql")
    return None


class Postgres:
    """A PostgreSQL server in a temporary folder; its processes are the cluster's children."""

    def __init__(self, cluster, bin_dir, psql):
        self.cluster = cluster
        self.bin_dir = bin_dir
        self.psql = psql
        self.dir = tempfile.mkdtemp(prefix="llmserve_pg_")
        self.data = os.path.join(self.dir, "data")
        self.port = free_port()
        self.password = f"pw-{os.getpid()}"
        # PostgreSQL refuses to run as root: its processes run as an unprivileged user, and die
        # with the test (setpriv keeps the parent-death signal that the uid change would clear).
        self.run_as = []
        if os.geteuid() == 0:
            try:
                user = pwd.getpwnam("postgres")
            except KeyError:
                user = pwd.getpwnam("nobody")
            os.chown(self.dir, user.pw_uid, user.pw_gid)
            self.run_as = ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}",
                           "--clear-groups", "--pdeathsig=KILL", "--"]
        pwfile = os.path.join(self.dir, "pwfile")
        with open(pwfile, "w") as f:
            f.write(self.password + "\n")
        if self.run_as:
            os.chown(pwfile, user.pw_uid, user.pw_gid)
        subprocess.run(self.run_as + [
            os.path.join(bin_dir, "initdb"), "-D", self.data, "-U", "llm", f"--pwfile={pwfile}",
            "--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--no-locale",
            "--no-sync"], check=True, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
            timeout=120)
        self.process = None

    def start(self):
        self.process = self.cluster.start("postgres", self.run_as + [
            os.path.join(self.bin_dir, "postgres"), "-D", self.data, "-p", str(self.port),
            "-k", self.dir, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off",
            "-c", "max_connections=20"])
        self.process.wait_for(r"database system is ready to accept connections")

    def crash(self):
        """Immediate shutdown: every backend dies without a checkpoint, as in a crash."""
        self.process.signal(signal.SIGQUIT)
        if self.process.wait(30) is None:
            raise Failure("postgres did not stop within 30 s of SIGQUIT")

    def stop(self):
        if self.process is not None and self.process.running():
            self.process.signal(signal.SIGINT)  # fast shutdown
            self.process.wait(30)
        shutil.rmtree(self.dir, ignore_errors=True)

    def url(self):
        return f"postgres://llm@127.0.0.1:{self.port}/postgres?connect_timeout=2"

    def query(self, sql):
        """The rows of `sql` as a list of dicts (through json_agg: text arrives exactly)."""
        env = dict(os.environ, PGPASSWORD=self.password)
        result = subprocess.run(
            [self.psql, "-h", LOOPBACK, "-p", str(self.port), "-U", "llm", "-d", "postgres",
             "-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-c",
             f"SELECT coalesce(json_agg(t), '[]') FROM ({sql}) t"],
            env=env, capture_output=True, timeout=60)
        if result.returncode != 0:
            raise Failure(f"psql {sql!r}: {result.stderr.decode(errors='replace')}")
        return json.loads(result.stdout)


def hs256_jwt(claims):
    def b64(data):
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT"}).encode())
    body = b64(json.dumps(claims).encode())
    signature = hmac.new(SECRET.encode(), f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(signature)}"


class Traffic:
    """Issues the mix of requests and remembers what each one should become in the log."""

    def __init__(self, gateway, alice_key):
        self.gateway = gateway
        self.alice = {"Authorization": f"Bearer {alice_key}"}
        self.bob = {"Authorization": "Bearer " + hs256_jwt(
            {"sub": HOSTILE_SUBJECT, "exp": int(time.time()) + 3600})}

    def one(self, i):
        """Sends request `i`; returns what the log should hold for it."""
        kind = ("completion", "chat", "stream", "unknown_model", "bad_key", "bad_request",
                "completion", "chat", "leave", "completion")[i % 10]
        port = self.gateway.http_port
        if kind == "completion":
            r = post_json(port, "/v1/completions",
                          {"model": "tiny", "prompt": f"request {i}", "max_tokens": 2},
                          self.alice)
            expect(r.status == 200, f"completion {i}: {r}")
            body = r.json()
            return {"kind": kind, "status": "OK", "request_id": body["id"],
                    "endpoint": "/v1/completions", "principal": "alice",
                    "prompt_tokens": body["usage"]["prompt_tokens"],
                    "completion_tokens": body["usage"]["completion_tokens"],
                    "content": ([("user", f"request {i}")],
                                [("assistant", body["choices"][0]["text"])])}
        if kind == "chat":
            r = post_json(port, "/v1/chat/completions",
                          {"model": "tiny", "max_tokens": 2,
                           "messages": [{"role": "user", "content": f"hi {i}"}]}, self.bob)
            expect(r.status == 200, f"chat {i}: {r}")
            body = r.json()
            return {"kind": kind, "status": "OK", "request_id": body["id"],
                    "endpoint": "/v1/chat/completions", "principal": HOSTILE_SUBJECT,
                    "prompt_tokens": body["usage"]["prompt_tokens"],
                    "completion_tokens": body["usage"]["completion_tokens"],
                    "content": ([("user", f"hi {i}")],
                                [("assistant", body["choices"][0]["message"]["content"])])}
        if kind == "stream":
            r = post_json(port, "/v1/completions",
                          {"model": "tiny", "prompt": f"stream {i}", "max_tokens": 3,
                           "stream": True, "stream_options": {"include_usage": True}},
                          self.alice)
            expect(r.status == 200, f"stream {i}: {r}")
            chunks = [json.loads(e) for e in sse_events(r.text) if e != "[DONE]"]
            usage = chunks[-1]["usage"]
            return {"kind": kind, "status": "OK", "request_id": chunks[0]["id"],
                    "endpoint": "/v1/completions", "principal": "alice",
                    "prompt_tokens": usage["prompt_tokens"],
                    "completion_tokens": usage["completion_tokens"]}
        if kind == "unknown_model":
            model = HOSTILE_MODELS[i % len(HOSTILE_MODELS)]
            r = post_json(port, "/v1/completions",
                          {"model": model, "prompt": "x", "max_tokens": 1}, self.alice)
            expect(r.status == 404, f"unknown model {i}: {r}")
            return {"kind": kind, "status": "NOT_FOUND", "model": model}
        if kind == "bad_key":
            r = post_json(port, "/v1/completions", {"model": "tiny", "prompt": "x"},
                          {"Authorization": "Bearer not-a-key"})
            expect(r.status == 401, f"bad key {i}: {r}")
            return {"kind": kind, "status": "UNAUTHENTICATED"}
        if kind == "bad_request":
            r = post_json(port, "/v1/completions",
                          {"model": "tiny", "prompt": "x", "max_tokens": -1}, self.alice)
            expect(r.status == 400, f"bad request {i}: {r}")
            return {"kind": kind, "status": "INVALID_ARGUMENT"}
        # A client that leaves: sends a long streamed request and closes after the headers.
        body = json.dumps({"model": "tiny", "prompt": f"leave {i}", "max_tokens": 200,
                           "stream": True})
        with socket.create_connection((LOOPBACK, port), timeout=30) as s:
            s.sendall((f"POST /v1/completions HTTP/1.1\r\nHost: x\r\n"
                       f"Authorization: {self.alice['Authorization']}\r\n"
                       f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
                       f"{body}").encode())
            head = b""
            while len(head) < 12:
                chunk = s.recv(64)
                if not chunk:
                    break
                head += chunk
            expect(head.startswith(b"HTTP/1.1 200"), f"leave {i}: {head!r}")
        return {"kind": kind, "status": None}  # cancelled, or OK when it finished first

    def run(self, first, count, threads=8):
        with concurrent.futures.ThreadPoolExecutor(threads) as pool:
            return list(pool.map(self.one, range(first, first + count)))


def log_metrics(gateway):
    text = gateway.metrics()
    records = {labels.get("result"): value for labels, value in
               metric_samples(text, "llmserve_gateway_request_log_records_total")}

    def single(name):
        samples = metric_samples(text, name)
        return samples[0][1] if samples else None
    return {"written": records.get("written", 0), "dropped": records.get("dropped", 0),
            "queued": single("llmserve_gateway_request_log_queued"),
            "sink_up": single("llmserve_gateway_request_log_sink_up"),
            "write_failures": single("llmserve_gateway_request_log_write_failures_total")}


def check_rows_of(expected, rows_by_request_id, rows, dropped=0):
    """Every OK request of `expected` has its row with the fields its response reported, but for
    at most `dropped` whose records the gateway counted as dropped (a full queue: how many depends
    on how fast the database is on a loaded machine, so it is accounted for, not bounded)."""
    missing = [e for e in expected if e["status"] == "OK"
               and e["request_id"] not in rows_by_request_id]
    expect(len(missing) <= dropped,
           f"{len(missing)} requests without a row, {dropped} records dropped; first: {missing[:1]}")
    for e in expected:
        if e["status"] != "OK" or e["request_id"] not in rows_by_request_id:
            continue
        row = rows_by_request_id[e["request_id"]]
        for field in ("endpoint", "principal", "prompt_tokens", "completion_tokens"):
            expect(row[field] == e[field], f"{field} of {e['request_id']}: {row[field]!r}, "
                                           f"expected {e[field]!r} (row {row})")
        expect(row["model"] == "tiny" and row["api"] == "http" and row["choices"] == 1,
               f"row {row}")
        expect(row["finish_reasons"] in ("length", "stop"), f"finish reason of {row}")
        expect(row["time_to_first_token_s"] is not None and row["duration_s"] > 0, f"row {row}")
        expect(row["worker"].startswith(f"{LOOPBACK}:"), f"worker of {row}")
        if "content" in e:  # --request_log_content: the texts, in the GenAI messages shape
            for column, messages in zip(("prompt", "output"), e["content"]):
                stored = [(m["role"], m["parts"][0]["content"]) for m in json.loads(row[column])]
                expect(stored == messages, f"{column} of {e['request_id']}: {row[column]!r}, "
                                           f"expected {messages!r}")


def run(binaries):
    found = find_postgres()
    if found is None or shutil.which("setpriv") is None and os.geteuid() == 0:
        log("SKIPPED: PostgreSQL's server (initdb, postgres), psql or setpriv is missing "
            "(apt-get install postgresql)")
        sys.exit(SKIP)
    total = dict(PHASES)
    with Cluster(*binaries, prefix="request_log") as cluster:
        database = Postgres(cluster, *found)
        try:
            database.start()
            cluster.make_model()
            worker = cluster.start_worker("worker", "--max_num_seqs=16")
            alice_key = f"alice-key-{os.getpid()}"
            keys = os.path.join(cluster.temp, "api-keys")
            with open(keys, "w") as f:
                f.write(f"alice {hashlib.sha256(alice_key.encode()).hexdigest()}\n")
            secret = os.path.join(cluster.temp, "jwt-secret")
            with open(secret, "w") as f:
                f.write(SECRET)
            # The password reaches the gateway the way docs/operations.md says: in PGPASSWORD.
            gateway = cluster.start_gateway(
                [worker], f"--api_keys_file={keys}", f"--jwt_hs256_secret_file={secret}",
                f"--request_log={database.url()}", f"--request_log_queue={QUEUE}",
                "--request_log_content",
                env=dict(os.environ, PGPASSWORD=database.password))
            cluster.wait_ready(gateway, [worker])
            traffic = Traffic(gateway, alice_key)

            # 1. Database up: every request is a row, with its fields. The first request's record
            # waits for the connection and the schema (SCRAM authentication alone takes a
            # while): the others start once it is in.
            up = traffic.run(0, 1, threads=1)
            wait_until("the first record written", lambda: log_metrics(gateway)["written"] == 1,
                       describe=lambda: f"{log_metrics(gateway)}\n{cluster.report()}")
            started = time.monotonic()
            up += traffic.run(1, total["up"] - 1, threads=UP_THREADS)
            # Every record is written or, if the queue overflowed on a slow machine, counted as
            # dropped; the writer keeps up with most of it (none were dropped when measured).
            wait_until("the phase-1 records written",
                       lambda: log_metrics(gateway)["written"] + log_metrics(gateway)["dropped"]
                       == total["up"] and log_metrics(gateway)["queued"] == 0,
                       describe=lambda: f"{log_metrics(gateway)}\n{cluster.report()}")
            phase1 = log_metrics(gateway)
            rows = database.query("SELECT * FROM llmserve_request_log")
            expect(len(rows) == phase1["written"], f"{len(rows)} rows, {phase1} for "
                                                   f"{total['up']} requests")
            expect(phase1["written"] > phase1["dropped"], f"the writer fell behind: {phase1}")
            by_id = {r["request_id"]: r for r in rows if r["status"] == "OK"}
            check_rows_of(up, by_id, rows, dropped=phase1["dropped"])
            for status in ("NOT_FOUND", "UNAUTHENTICATED", "INVALID_ARGUMENT"):
                want = sum(1 for e in up if e["status"] == status)
                got = sum(1 for r in rows if r["status"] == status)
                expect(want - phase1["dropped"] <= got <= want,
                       f"{got} {status} rows, expected {want} ({phase1['dropped']} dropped)")
            stored_models = {r["model"] for r in rows if r["status"] == "NOT_FOUND"}
            expect(stored_models == set(HOSTILE_MODELS)
                   or phase1["dropped"] and stored_models and stored_models < set(HOSTILE_MODELS),
                   f"model names stored as {stored_models!r}, sent {HOSTILE_MODELS!r}")
            expect(all(r["principal"] == "" and r["error"] for r in rows
                       if r["status"] == "UNAUTHENTICATED"), "a refused key has a principal")
            expect(all(r["principal_kind"] == "jwt" for r in rows
                       if r["principal"] == HOSTILE_SUBJECT), "JWT rows")
            left = sum(1 for e in up if e["kind"] == "leave")
            cancelled = sum(1 for r in rows if r["status"] == "CANCELLED")
            # A client that left is CANCELLED, unless its 200 tokens were done before the close
            # reached the gateway (every request is a row either way: counted above).
            expect(cancelled <= left, f"{cancelled} cancelled rows of {left} clients that left")
            phase1_s = time.monotonic() - started

            # 2. The database crashes under load: every request is still served.
            database.crash()
            started = time.monotonic()
            down = traffic.run(total["up"], total["down"])
            phase2_s = time.monotonic() - started
            wait_until("the log to notice the database is gone",
                       lambda: log_metrics(gateway)["sink_up"] == 0,
                       describe=lambda: str(log_metrics(gateway)))
            during_outage = log_metrics(gateway)

            # 3. Restarted: the queued records go in, new ones follow.
            database.start()
            restart_time = database.query("SELECT now() AS now")[0]["now"]
            # The writer finds the database again at its next retry (backoff up to 10 s) and
            # writes the backlog; the new requests come after, so that none of theirs is dropped.
            wait_until("the backlog written after the restart",
                       lambda: log_metrics(gateway)["sink_up"] == 1
                       and log_metrics(gateway)["queued"] == 0,
                       describe=lambda: f"{log_metrics(gateway)}\n{cluster.report()}")
            first = total["up"] + total["down"]
            dropped_before_phase3 = log_metrics(gateway)["dropped"]
            restarted = traffic.run(first, total["restarted"], threads=UP_THREADS)
            requests = sum(total.values())
            wait_until("every record written or dropped",
                       lambda: log_metrics(gateway)["queued"] == 0
                       and log_metrics(gateway)["written"] + log_metrics(gateway)["dropped"]
                       == requests,
                       describe=lambda: f"{log_metrics(gateway)}\n{cluster.report()}")
            final = log_metrics(gateway)
            rows = database.query("SELECT * FROM llmserve_request_log")
            expect(final["sink_up"] == 1, f"sink still down: {final}")
            expect(final["dropped"] > 0, f"an outage past the queue dropped nothing: {final}")
            expect(len(rows) == final["written"],
                   f"{len(rows)} rows but the gateway wrote {final['written']}: {final}")
            expect(len(rows) + final["dropped"] == requests,
                   f"{len(rows)} rows + {final['dropped']} dropped != {requests} requests")
            ok_ids = [r["request_id"] for r in rows if r["status"] == "OK"]
            expect(len(ok_ids) == len(set(ok_ids)), "a request's record was stored twice")
            by_id = {r["request_id"]: r for r in rows if r["status"] == "OK"}
            check_rows_of(restarted, by_id, rows, dropped=final["dropped"] - dropped_before_phase3)
            resumed = database.query(
                f"SELECT count(*) AS n FROM llmserve_request_log WHERE time >= '{restart_time}'")
            expect(resumed[0]["n"] >= sum(1 for e in restarted if e["status"]),
                   f"rows after the restart: {resumed}")
            # The index an operator's per-key queries use exists.
            indexes = {r["indexname"] for r in database.query(
                "SELECT indexname FROM pg_indexes WHERE tablename = 'llmserve_request_log'")}
            expect("llmserve_request_log_principal_time" in indexes, f"indexes: {indexes}")
            migrations = database.query("SELECT version FROM llmserve_schema_migrations")
            expect(len(migrations) == 4, f"migrations applied: {migrations}")
            print(json.dumps({
                "requests": requests, "rows": len(rows), "dropped": final["dropped"],
                "cancelled_in_phase_1": cancelled,
                "write_failures": final["write_failures"], "queue": QUEUE,
                "during_outage": during_outage,
                "phase_seconds": {"up": round(phase1_s, 1), "down": round(phase2_s, 1)},
                "requests_per_second": {"up": round(total["up"] / phase1_s, 1),
                                        "down": round(total["down"] / phase2_s, 1)}}))
            expect(len(down) == total["down"], "requests during the outage")
        finally:
            database.stop()


if __name__ == "__main__":
    sys.exit(run_binaries_test(run, "usage: request_log_test.py GATEWAY WORKER MAKE_MODEL"))
