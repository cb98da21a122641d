#!/usr/bin/python3
"""Hostile input against the real gateway and worker on loopback: a table of malformed HTTP
requests and one of malformed gRPC requests, each row with the exact status it must get, then
slow and non-reading clients.

  - HTTP (raw bytes on a fresh socket, Python's socket module): framing (transfer-encoding and
    content-length, host, folded and oversized headers, chunk sizes and extensions, trailers,
    oversized bodies), bodies (not JSON, wrong content type, deep or huge JSON, invalid UTF-8,
    a wrong type or value for every main field of both endpoints, streamed too), unknown paths
    and methods. Each row: the status line's code and, where the server sends one, an OpenAI
    error object with a message.
  - gRPC (grpcio's generic API: raw request bytes, identity serializers), on the gateway's public
    API and the worker's: garbage bytes, truncated and deeply nested messages, invalid UTF-8
    strings, oversized messages, bad token ids, out-of-range sampling parameters, unknown
    methods. Each row: the status code, and a message where one is promised.
  - After every row the gateway answers /healthz (and the worker its gRPC health check); the
    processes are alive at the end, and a real completion still works.
  - libprotobuf's log: 300 requests with invalid UTF-8 leave at most 2 such lines in each log.
  - Slowloris: 20 connections that send their headers one byte per second are closed by the
    gateway at its header timeout (--http_header_timeout, 3 s here), while a normal client keeps
    being served.
  - Non-reading clients: 28 streams whose clients do not read (4 KiB receive buffers) while they
    generate, 4 of them about 6 MB each (more than the kernel's socket buffers hold): the
    gateway's resident memory (VmRSS) grows by no more than a bound of what the streams hold,
    the worker finishes them (nothing waits on the clients), other clients are served
    meanwhile, and each stream is complete when its client finally reads it.
Prints a JSON summary of what it measured.

Usage: hostile_input_test.py GATEWAY WORKER MAKE_MODEL
Exit 0 on success, 77 (skipped) without python3-grpcio, 1 on failure.
"""

import json
import socket
import subprocess
import sys
import threading
import time

from e2e_support import (SANITIZER_SLOWDOWN, SKIP, Cluster, Failure, dechunk, exit_on_signals,
                         expect, grpc_channel, have_grpcio, http_get, log, metric_sum, pb_message,
                         post_json, raw_http, raw_stream, raw_unary, sse_events, wait_until)

PATIENCE_S = 60
MAX_BODY_BYTES = 1 << 20  # --max_body_bytes
# The gateway's --http_header_timeout here (10 s by default): shorter, so that the slowloris
# phase does not spend its default 10 s waiting.
HEADER_TIMEOUT_S = 3
SLOWLORIS_CLIENTS = 20
NON_READING_LIGHT = 24  # streams of NON_READING_TOKENS tokens
NON_READING_TOKENS = 300
# Streams of about 6 MB each. Two under the sanitizers, where the worker took 40 s to generate
# the 40,000 tokens of four: each alone overflows the socket buffers, which is what they test.
NON_READING_HEAVY = 4 if SANITIZER_SLOWDOWN == 1 else 2
# While clients do not read, the gateway holds what the kernel's socket buffers cannot: its RSS
# may grow by the streams' bytes times this, plus the slack (allocator arenas, gRPC), no more.
RSS_BYTES_FACTOR = 1.5
# AddressSanitizer keeps freed memory in its quarantine (up to 256 MB) and pads every block, so
# under the sanitizers RSS follows what was ever allocated more than what is held: more slack
# (the bound still catches a gateway that buffers without limit: 6 MB per heavy stream).
RSS_SLACK_KB = 32 * 1024 if SANITIZER_SLOWDOWN == 1 else 64 * 1024
UTF8_FLOOD = 300


# ---- raw HTTP -------------------------------------------------------------------------------------

def request(method, path, body=b"", headers=None, version="HTTP/1.1", host=True):
    """The bytes of a request; content-length added for a body unless headers frame it."""
    if isinstance(body, str):
        body = body.encode()
    lines = [f"{method} {path} {version}"]
    if host:
        lines.append("Host: 127.0.0.1")
    headers = list(headers or [])
    names = {name.lower() for name, _ in headers}
    if body and "content-length" not in names and "transfer-encoding" not in names:
        headers.append(("Content-Length", str(len(body))))
    lines += [f"{name}: {value}" for name, value in headers]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


JSON = [("Content-Type", "application/json")]


def post(path, body, headers=JSON):
    if not isinstance(body, (str, bytes)):
        body = json.dumps(body)
    return request("POST", path, body, headers)


def completion(**fields):
    body = {"model": "tiny", "prompt": "hello", "max_tokens": 2}
    body.update(fields)
    return {k: v for k, v in body.items() if v is not DROP}


def chat(**fields):
    body = {"model": "tiny", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    body.update(fields)
    return {k: v for k, v in body.items() if v is not DROP}


DROP = object()  # a field left out


def chunked(*chunks, trailer=b""):
    return b"".join(chunks) + b"0\r\n" + trailer + b"\r\n"


def chunk(data):
    data = data.encode() if isinstance(data, str) else data
    return f"{len(data):x}\r\n".encode() + data + b"\r\n"


VALID = json.dumps(completion())


def http_rows():
    """(name, request bytes, status): every row must get exactly that status."""
    deep = "[" * 100000 + "]" * 100000
    wide = '{"model": "tiny", "prompt": "x", "ignored": [' + ",".join(["{}"] * 300000) + "]}"
    rows = [
        # Framing.
        ("garbage request line", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n", 400),
        ("no version", b"GET /healthz\r\n\r\n", 400),
        ("bad version", b"GET /healthz HTTP/9.9\r\nHost: x\r\n\r\n", 400),
        ("space in the header name", b"GET /healthz HTTP/1.1\r\nHost: x\r\nBad Name: 1\r\n\r\n",
         400),
        ("no colon in a header", b"GET /healthz HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n", 400),
        ("NUL in a header value", b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-A: a\x00b\r\n\r\n", 400),
        ("HTTP/1.1 without host", request("GET", "/healthz", host=False), 400),
        ("two host headers", request("GET", "/healthz", headers=[("Host", "other")]), 400),
        ("folded header line",
         b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Folded: a\r\n  b\r\n\r\n", 400),
        ("transfer-encoding gzip", post("/v1/completions", chunk(VALID) + b"0\r\n\r\n",
                                        JSON + [("Transfer-Encoding", "gzip")]), 501),
        ("transfer-encoding identity", post("/v1/completions", VALID,
                                            JSON + [("Transfer-Encoding", "identity"),
                                                    ("Content-Length", str(len(VALID)))]), 400),
        ("transfer-encoding xchunked", post("/v1/completions", chunked(chunk(VALID)),
                                            JSON + [("Transfer-Encoding", "xchunked")]), 501),
        ("transfer-encoding gzip, chunked", post("/v1/completions", chunked(chunk(VALID)),
                                                 JSON + [("Transfer-Encoding", "gzip, chunked")]),
         501),
        ("transfer-encoding gzip then chunked (two fields)",
         post("/v1/completions", chunked(chunk(VALID)),
              JSON + [("Transfer-Encoding", "gzip"), ("Transfer-Encoding", "chunked")]), 501),
        ("chunked and content-length", post("/v1/completions", chunked(chunk(VALID)),
                                            JSON + [("Transfer-Encoding", "chunked"),
                                                    ("Content-Length", "5")]), 400),
        ("content-length and chunked", post("/v1/completions", chunked(chunk(VALID)),
                                            JSON + [("Content-Length", "5"),
                                                    ("Transfer-Encoding", "chunked")]), 400),
        ("transfer-encoding in HTTP/1.0",
         request("POST", "/v1/completions", chunked(chunk(VALID)),
                 JSON + [("Transfer-Encoding", "chunked")], version="HTTP/1.0"), 400),
        ("two different content-lengths", post("/v1/completions", VALID,
                                               JSON + [("Content-Length", str(len(VALID))),
                                                       ("Content-Length", "3")]), 400),
        ("content-length not a number", post("/v1/completions", VALID,
                                             JSON + [("Content-Length", "12abc")]), 400),
        ("negative content-length", post("/v1/completions", VALID,
                                         JSON + [("Content-Length", "-1")]), 400),
        ("content-encoding gzip", post("/v1/completions", VALID,
                                       JSON + [("Content-Encoding", "gzip")]), 415),
        ("headers over 16 KiB", request("GET", "/healthz", headers=[("X-Big", "a" * 20000)]),
         431),
        ("1000 small headers",
         request("GET", "/healthz", headers=[(f"X-H{i}", "v" * 20) for i in range(1000)]), 431),
        ("100 KB chunk extension", post("/v1/completions",
                                        b"5;ext=" + b"e" * 100000 + b"\r\nhello\r\n0\r\n\r\n",
                                        JSON + [("Transfer-Encoding", "chunked")]), 400),
        ("chunk size not hex", post("/v1/completions", b"zz\r\nhello\r\n0\r\n\r\n",
                                    JSON + [("Transfer-Encoding", "chunked")]), 400),
        ("negative chunk size", post("/v1/completions", b"-5\r\nhello\r\n0\r\n\r\n",
                                     JSON + [("Transfer-Encoding", "chunked")]), 400),
        ("chunk size overflowing 64 bits",
         post("/v1/completions", b"fffffffffffffffffffff\r\nhello\r\n0\r\n\r\n",
              JSON + [("Transfer-Encoding", "chunked")]), 400),
        ("chunk data without its CRLF", post("/v1/completions", b"5\r\nhelloXX0\r\n\r\n",
                                             JSON + [("Transfer-Encoding", "chunked")]), 400),
        ("chunked body over the limit",
         post("/v1/completions", chunked(*[chunk("x" * 65536)] * (MAX_BODY_BYTES // 65536 + 2)),
              JSON + [("Transfer-Encoding", "chunked")]), 413),
        ("20 KB trailer", post("/v1/completions",
                               chunked(chunk(VALID), trailer=b"X-Trailer: " + b"t" * 20000 +
                                       b"\r\n"),
                               JSON + [("Transfer-Encoding", "chunked")]), 431),
        ("content-length over the limit (body not sent)",
         post("/v1/completions", b"", JSON + [("Content-Length", str(MAX_BODY_BYTES + 1))]), 413),
        ("body over the limit", post("/v1/completions", b"{" + b" " * (MAX_BODY_BYTES + 10)
                                     + b"}"), 413),
        # Content type and JSON.
        ("text/plain body", post("/v1/completions", VALID, [("Content-Type", "text/plain")]),
         415),
        ("no content-type", post("/v1/completions", VALID, []), 415),
        ("form body", post("/v1/completions", "prompt=hi",
                           [("Content-Type", "application/x-www-form-urlencoded")]), 415),
        ("two content-types", post("/v1/completions", VALID,
                                   JSON + [("Content-Type", "application/json")]), 415),
        ("not JSON", post("/v1/completions", "{model: tiny"), 400),
        ("empty body", request("POST", "/v1/completions", b"",
                               JSON + [("Content-Length", "0")]), 400),
        ("JSON array", post("/v1/completions", "[1, 2]"), 400),
        ("JSON string", post("/v1/completions", '"hello"'), 400),
        ("JSON null", post("/v1/completions", "null"), 400),
        ("trailing garbage", post("/v1/completions", VALID + "}}"), 400),
        ("JSON nested 100,000 deep", post("/v1/completions", deep), 400),
        ("300,000 values in an ignored field", post("/v1/completions", wide), 400),
        ("invalid UTF-8 in the prompt",
         post("/v1/completions", b'{"model": "tiny", "prompt": "\xff\xfe", "max_tokens": 2}'),
         400),
        ("lone surrogate escape in the prompt",
         post("/v1/completions", '{"model": "tiny", "prompt": "\\ud800", "max_tokens": 2}'), 400),
        ("invalid UTF-8 in a chat message",
         post("/v1/chat/completions",
              b'{"model": "tiny", "messages": [{"role": "user", "content": "\xc3"}]}'), 400),
        # Embeddings: the model here generates text, and every malformed body is refused first.
        ("embeddings of a generation model",
         post("/v1/embeddings", '{"model": "tiny", "input": "hi"}'), 400),
        ("embeddings nested 100,000 deep", post("/v1/embeddings", deep), 400),
        ("embeddings input of invalid UTF-8",
         post("/v1/embeddings", b'{"model": "tiny", "input": "\xff"}'), 400),
        ("embeddings token id past int32",
         post("/v1/embeddings", '{"model": "tiny", "input": [[1, 99999999999]]}'), 400),
        ("embeddings 2,049 inputs",
         post("/v1/embeddings", json.dumps({"model": "tiny", "input": ["a"] * 2049})), 400),
        # Paths and methods.
        ("unknown path", request("GET", "/v2/everything"), 404),
        ("unknown POST path", post("/v1/moderations", VALID), 404),
        ("GET on completions", request("GET", "/v1/completions"), 405),
        ("DELETE on healthz", request("DELETE", "/healthz"), 405),
        ("PUT on chat", request("PUT", "/v1/chat/completions", VALID, JSON), 405),
        ("path traversal", request("GET", "/../../etc/passwd"), 404),
        ("absolute-form target", request("GET", "http://evil.example/healthz"), 404),
    ]
    # A wrong type or value for every main field of both endpoints, streamed and not.
    for endpoint, make in (("/v1/completions", completion), ("/v1/chat/completions", chat)):
        fields = [
            ("model", 5), ("model", ["tiny"]), ("model", "no-such-model"),
            ("max_tokens", "10"), ("max_tokens", -1), ("max_tokens", 1.5), ("max_tokens", 10**12),
            ("max_tokens", 0),
            ("temperature", "hot"), ("temperature", -1), ("temperature", 1e9),
            ("top_p", 2), ("top_p", 0), ("top_p", "x"), ("top_k", -5), ("top_k", 10**9),
            ("min_p", 2), ("presence_penalty", 9), ("frequency_penalty", -9),
            ("repetition_penalty", 0), ("n", 0), ("n", 1000), ("n", "2"), ("seed", "x"),
            ("seed", 2**64), ("stop", 5), ("stop", [1, 2]), ("stop", ["s"] * 100),
            ("stop", "s" * 10000), ("stream", "yes"), ("stream_options", "all"),
            ("stream_options", {"include_usage": "yes"}), ("ignore_eos", "true"),
            ("min_tokens", 10), ("stop_token_ids", [-1]), ("user", 5),
        ]
        if endpoint == "/v1/completions":
            fields += [("prompt", 5), ("prompt", {"text": "hi"}), ("prompt", DROP),
                       ("prompt", []), ("prompt", [10**9]), ("prompt", [-1]),
                       ("prompt", [[1, 2], [3]]), ("prompt", "word " * 5000),
                       ("logprobs", 100), ("logprobs", "x")]
        else:
            fields += [("messages", "hi"), ("messages", []), ("messages", DROP),
                       ("messages", [{"role": "wizard", "content": "hi"}]),
                       ("messages", [{"role": "user", "content": 5}]),
                       ("messages", [{"content": "hi"}]), ("messages", [5]),
                       ("messages", [{"role": "user", "content": [{"type": "image_url"}]}]),
                       ("messages", [{"role": "user", "content": "hi"}] * 20000),
                       ("logprobs", "x"), ("top_logprobs", 100)]
        for name, value in fields:
            status = 404 if value == "no-such-model" else 400
            body = make(**{name: value})
            shown = "missing" if value is DROP else json.dumps(value)[:40]
            rows.append((f"{endpoint} {name}={shown}", post(endpoint, body), status))
            if name != "stream" and value is not DROP and name != "model":
                streamed = dict(body, stream=True)
                rows.append((f"{endpoint} streamed {name}={shown}",
                             post(endpoint, streamed), status))
    return rows


def run_http_table(cluster, gateway, summary):
    rows = http_rows()
    problems = []
    started = time.monotonic()
    statuses = {}
    for name, data, expected in rows:
        response = raw_http(gateway.http_port, data)
        statuses[expected] = statuses.get(expected, 0) + 1
        if response.status != expected:
            problems.append(f"{name}: expected HTTP {expected}, got {response!r}")
        elif not error_message(response):
            problems.append(f"{name}: HTTP {expected} without an error message: {response!r}")
        if http_get(gateway.http_port, "/healthz")[0] != 200 or not gateway.process.running():
            raise Failure(f"{name}: the gateway is not healthy after it\n{cluster.report()}")
    seconds = time.monotonic() - started
    expect(not problems, f"{len(problems)} of {len(rows)} HTTP rows got the wrong answer:\n  "
           + "\n  ".join(problems))
    log(f"HTTP table: {len(rows)} rows, each with its status ({statuses}), gateway healthy "
        f"after each, {seconds:.1f} s")
    summary["http_rows"] = len(rows)
    summary["http_statuses"] = statuses


def error_message(response):
    try:
        return (json.loads(response.body).get("error") or {}).get("message")
    except (ValueError, AttributeError):
        return None


# ---- raw gRPC -------------------------------------------------------------------------------------

GATEWAY_GENERATE = "/llmserve.v1.Inference/Generate"
GATEWAY_STREAM = "/llmserve.v1.Inference/GenerateStream"
WORKER_GENERATE = "/llmserve.worker.v1.Worker/Generate"
PARSE_ERROR = "could not be parsed"


def sampling(**fields):
    numbers = {"temperature": 1, "top_k": 2, "top_p": 3, "min_p": 4, "repetition_penalty": 5,
               "presence_penalty": 6, "frequency_penalty": 7, "seed": 8, "top_logprobs": 9}
    return pb_message(*((numbers[name], value) for name, value in fields.items()))


def gateway_request(*fields, text="hello", max_tokens=2):
    """llmserve.v1.GenerateRequest: model, a text prompt (unless given another), stopping."""
    base = [(1, "tiny")]
    if text is not None:
        base.append((2, text))
    base.append((6, pb_message((1, max_tokens))))
    return pb_message(*(base + list(fields)))


def worker_request(*fields, ids=(1, 2, 3), max_tokens=2, request_id="hostile-1"):
    """llmserve.worker.v1.GenerateRequest: request_id, prompt_token_ids, max_tokens."""
    base = [(1, request_id), (2, list(ids)), (4, max_tokens)]
    return pb_message(*(base + list(fields)))


def deep_groups(depth):
    # Start-group tags of field 15 (unknown), nested `depth` deep, never closed.
    return bytes([15 << 3 | 3]) * depth


def grpc_rows():
    """(name, target, method, request bytes, code name, substring of the message or None)."""
    big = 5 << 20
    rows = [
        ("garbage bytes", "gateway", GATEWAY_GENERATE, b"\xff" * 64, "INVALID_ARGUMENT",
         PARSE_ERROR),
        ("truncated varint", "gateway", GATEWAY_GENERATE, b"\x08", "INVALID_ARGUMENT",
         PARSE_ERROR),
        ("length past the end", "gateway", GATEWAY_GENERATE, b"\x12\x7fabc", "INVALID_ARGUMENT",
         PARSE_ERROR),
        ("groups nested 10,000 deep", "gateway", GATEWAY_GENERATE, deep_groups(10000),
         "INVALID_ARGUMENT", PARSE_ERROR),
        ("invalid UTF-8 text", "gateway", GATEWAY_GENERATE,
         gateway_request(text=b"\xff\xfe\xfd"), "INVALID_ARGUMENT", PARSE_ERROR),
        ("invalid UTF-8 model", "gateway", GATEWAY_GENERATE, pb_message((1, b"\xc3"), (2, "hi")),
         "INVALID_ARGUMENT", PARSE_ERROR),
        ("invalid UTF-8 in a stop string", "gateway", GATEWAY_GENERATE,
         pb_message((1, "tiny"), (2, "hi"), (6, pb_message((2, b"\xe2\x82")))),
         "INVALID_ARGUMENT", PARSE_ERROR),
        ("garbage on the stream", "gateway", GATEWAY_STREAM, b"\xff" * 64, "INVALID_ARGUMENT",
         PARSE_ERROR),
        ("garbage to Tokenize", "gateway", "/llmserve.v1.Inference/Tokenize", b"\xff\x00",
         "INVALID_ARGUMENT", PARSE_ERROR),
        ("garbage to ListModels", "gateway", "/llmserve.v1.Inference/ListModels", b"\xff",
         "INVALID_ARGUMENT", PARSE_ERROR),
        ("5 MiB message", "gateway", GATEWAY_GENERATE, gateway_request(text="x" * big),
         "RESOURCE_EXHAUSTED", None),
        ("no prompt", "gateway", GATEWAY_GENERATE, gateway_request(text=None),
         "INVALID_ARGUMENT", "prompt"),
        ("unknown model", "gateway", GATEWAY_GENERATE, pb_message((1, "nope"), (2, "hi")),
         "NOT_FOUND", "nope"),
        ("token id past the vocabulary", "gateway", GATEWAY_GENERATE,
         gateway_request((3, pb_message((1, [10**8]))), text=None), "INVALID_ARGUMENT", None),
        ("negative token id", "gateway", GATEWAY_GENERATE,
         gateway_request((3, pb_message((1, [-1]))), text=None), "INVALID_ARGUMENT", None),
        ("empty token ids", "gateway", GATEWAY_GENERATE,
         gateway_request((3, b""), text=None), "INVALID_ARGUMENT", "prompt"),
        ("prompt longer than the context", "gateway", GATEWAY_GENERATE,
         gateway_request((3, pb_message((1, [5] * 2000))), text=None), "INVALID_ARGUMENT",
         "context"),
        ("no chat messages", "gateway", GATEWAY_GENERATE,
         gateway_request((4, b""), text=None), "INVALID_ARGUMENT", "messages"),
        ("unknown chat role", "gateway", GATEWAY_GENERATE,
         gateway_request((4, pb_message((1, pb_message((1, "wizard"), (2, "hi"))))), text=None),
         "INVALID_ARGUMENT", "role"),
        ("priority 5000", "gateway", GATEWAY_GENERATE, gateway_request((7, 5000)),
         "INVALID_ARGUMENT", "priority"),
        ("request_id with a control character", "gateway", GATEWAY_GENERATE,
         gateway_request((8, "id\x01")), "INVALID_ARGUMENT", "request_id"),
        ("request_id of 1000 characters", "gateway", GATEWAY_GENERATE,
         gateway_request((8, "r" * 1000)), "INVALID_ARGUMENT", "request_id"),
        ("min_tokens over max_tokens", "gateway", GATEWAY_GENERATE,
         pb_message((1, "tiny"), (2, "hi"), (6, pb_message((1, 2), (5, 10)))),
         "INVALID_ARGUMENT", "min_tokens"),
        ("unknown method", "gateway", "/llmserve.v1.Inference/Nope", b"", "UNIMPLEMENTED", None),
        ("unknown service", "gateway", "/no.Such/Method", b"", "UNIMPLEMENTED", None),
    ]
    for name, value in (("temperature", -1.0), ("temperature", float("nan")),
                        ("top_p", 2.0), ("top_p", 0.0), ("top_k", -5), ("top_k", 10**6),
                        ("min_p", 1.5), ("repetition_penalty", 0.0), ("presence_penalty", 9.0),
                        ("frequency_penalty", -9.0), ("top_logprobs", 100), ("top_logprobs", -1)):
        rows.append((f"sampling {name}={value}", "gateway", GATEWAY_GENERATE,
                     gateway_request((5, sampling(**{name: value}))), "INVALID_ARGUMENT",
                     name))
        rows.append((f"worker sampling {name}={value}", "worker", WORKER_GENERATE,
                     worker_request((3, sampling(**{name: value}))), "INVALID_ARGUMENT",
                     name))
    rows += [
        ("worker: garbage bytes", "worker", WORKER_GENERATE, b"\xff" * 64, "INVALID_ARGUMENT",
         PARSE_ERROR),
        ("worker: groups nested 10,000 deep", "worker", WORKER_GENERATE, deep_groups(10000),
         "INVALID_ARGUMENT", PARSE_ERROR),
        ("worker: invalid UTF-8 request_id", "worker", WORKER_GENERATE,
         worker_request(request_id=b"\xff\xfe"), "INVALID_ARGUMENT", PARSE_ERROR),
        ("worker: 5 MiB message", "worker", WORKER_GENERATE,
         pb_message((1, "hostile-1"), (2, b"\x07" * big), (4, 2)), "RESOURCE_EXHAUSTED", None),
        ("worker: empty prompt", "worker", WORKER_GENERATE, worker_request(ids=()),
         "INVALID_ARGUMENT", "prompt_token_ids"),
        ("worker: token id past the vocabulary", "worker", WORKER_GENERATE,
         worker_request(ids=(1, 10**8)), "INVALID_ARGUMENT", "prompt_token_ids[1]"),
        ("worker: negative token id", "worker", WORKER_GENERATE, worker_request(ids=(-3,)),
         "INVALID_ARGUMENT", "prompt_token_ids[0]"),
        ("worker: prompt longer than the context", "worker", WORKER_GENERATE,
         worker_request(ids=[5] * 2000), "INVALID_ARGUMENT", "prompt_token_ids"),
        ("worker: max_tokens past the context", "worker", WORKER_GENERATE,
         worker_request(max_tokens=2000), "INVALID_ARGUMENT", "max_tokens"),
        ("worker: 100 stop token ids", "worker", WORKER_GENERATE,
         worker_request((5, list(range(100)))), "INVALID_ARGUMENT", "stop_token_ids"),
        ("worker: stop token id past the vocabulary", "worker", WORKER_GENERATE,
         worker_request((5, [10**8])), "INVALID_ARGUMENT", "stop_token_ids"),
        ("worker: 1000-byte cache_salt", "worker", WORKER_GENERATE,
         worker_request((9, b"s" * 1000)), "INVALID_ARGUMENT", "cache_salt"),
        ("worker: min_tokens over max_tokens", "worker", WORKER_GENERATE,
         worker_request((7, 10)), "INVALID_ARGUMENT", "min_tokens"),
        ("worker: empty request_id", "worker", WORKER_GENERATE, worker_request(request_id=""),
         "INVALID_ARGUMENT", "request_id"),
        ("worker: request_id with a space", "worker", WORKER_GENERATE,
         worker_request(request_id="a b"), "INVALID_ARGUMENT", "request_id"),
        ("worker: priority 5000", "worker", WORKER_GENERATE, worker_request((8, 5000)),
         "INVALID_ARGUMENT", "priority"),
        ("worker: garbage to GetModelInfo", "worker", "/llmserve.worker.v1.Worker/GetModelInfo",
         b"\xff", "INVALID_ARGUMENT", PARSE_ERROR),
        ("worker: garbage to WatchLoad", "worker", "/llmserve.worker.v1.Worker/WatchLoad",
         b"\xff", "INVALID_ARGUMENT", PARSE_ERROR),
        ("worker: unknown method", "worker", "/llmserve.worker.v1.Worker/Nope", b"",
         "UNIMPLEMENTED", None),
    ]
    return rows


STREAMING = {GATEWAY_STREAM, WORKER_GENERATE, "/llmserve.worker.v1.Worker/WatchLoad"}


def grpc_call(channel, method, data):
    if method in STREAMING:
        code, details, _ = raw_stream(channel, method, data, timeout=30)
    else:
        code, details, _ = raw_unary(channel, method, data, timeout=30)
    return code, details


def worker_healthy(channel):
    code, _, reply = raw_unary(channel, "/grpc.health.v1.Health/Check", b"", timeout=10)
    return code.name == "OK" and reply == b"\x08\x01"


def run_grpc_table(cluster, gateway, worker, channels, summary):
    rows = grpc_rows()
    problems = []
    codes = {}
    for name, target, method, data, expected, needle in rows:
        code, details = grpc_call(channels[target], method, data)
        codes[expected] = codes.get(expected, 0) + 1
        if code.name != expected:
            problems.append(f"{name}: expected {expected}, got {code.name}: {details[:200]!r}")
        elif needle is not None and needle not in details:
            problems.append(f"{name}: {expected} without {needle!r} in its message: "
                            f"{details[:200]!r}")
        if http_get(gateway.http_port, "/healthz")[0] != 200 or not worker_healthy(
                channels["worker"]):
            raise Failure(f"{name}: the gateway or the worker is not healthy after it\n"
                          f"{cluster.report()}")
    expect(not problems, f"{len(problems)} of {len(rows)} gRPC rows got the wrong answer:\n  "
           + "\n  ".join(problems))
    log(f"gRPC table: {len(rows)} rows, each with its code ({codes}), gateway and worker healthy "
        f"after each")
    summary["grpc_rows"] = len(rows)
    summary["grpc_codes"] = codes


def check_protobuf_log(cluster, gateway, worker, channels, summary):
    """A flood of invalid UTF-8 leaves a line or two in each log, not one per request."""
    bad_gateway = gateway_request(text=b"\xff")
    bad_worker = worker_request(request_id=b"\xff")
    for _ in range(UTF8_FLOOD):
        raw_unary(channels["gateway"], GATEWAY_GENERATE, bad_gateway, timeout=10)
        raw_stream(channels["worker"], WORKER_GENERATE, bad_worker, timeout=10)
    lines = {}
    for process in (gateway.process, worker.process):
        lines[process.name] = sum(1 for line in process.output().splitlines()
                                  if "invalid UTF-8" in line)
    expect(all(count <= 2 for count in lines.values()),
           f"libprotobuf log: expected at most 2 lines about invalid UTF-8 in each log after "
           f"{UTF8_FLOOD} such requests (and the table's), got {lines}")
    log(f"libprotobuf log: {UTF8_FLOOD} more requests with invalid UTF-8 each; lines about it: "
        f"{lines}")
    summary["invalid_utf8_log_lines"] = lines


# ---- slow and non-reading clients -----------------------------------------------------------------

class Prober:
    """A normal client: a short completion every `interval_s` until stopped."""

    def __init__(self, port, interval_s=0.25):
        self.port = port
        self.results = []
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._run, args=(interval_s,), daemon=True)
        self.thread.start()

    def _run(self, interval_s):
        count = 0
        while not self.stop_event.is_set():
            count += 1
            try:
                response = post_json(self.port, "/v1/completions",
                                     {"model": "tiny", "prompt": f"probe {count}",
                                      "max_tokens": 4, "ignore_eos": True}, timeout=30)
                self.results.append((response.status, response.seconds))
            except OSError as error:
                self.results.append((f"{type(error).__name__}: {error}", 0.0))
            self.stop_event.wait(interval_s)

    def stop(self, what):
        self.stop_event.set()
        self.thread.join(40)
        expect(not self.thread.is_alive(), f"{what}: the normal client hangs")
        failed = [r for r in self.results if r[0] != 200]
        expect(self.results and not failed,
               f"{what}: expected the normal client to be served meanwhile; "
               f"{len(failed)} of {len(self.results)} requests failed: {failed[:3]}")
        return len(self.results), max(seconds for _, seconds in self.results)


def slowloris(cluster, gateway, summary):
    closed_after = [None] * SLOWLORIS_CLIENTS
    header = b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: " + b"s" * 64

    def client(index):
        sock = socket.create_connection(("127.0.0.1", gateway.http_port), timeout=5)
        opened = time.monotonic()
        try:
            for byte in header:
                sock.sendall(bytes([byte]))
                sock.settimeout(1.0)
                try:
                    if sock.recv(1024) == b"":
                        closed_after[index] = time.monotonic() - opened
                        return
                except socket.timeout:
                    pass
                except ConnectionResetError:
                    closed_after[index] = time.monotonic() - opened
                    return
                if time.monotonic() - opened > HEADER_TIMEOUT_S * 2:
                    return
        except (BrokenPipeError, ConnectionResetError):
            closed_after[index] = time.monotonic() - opened
        finally:
            sock.close()

    prober = Prober(gateway.http_port)
    threads = [threading.Thread(target=client, args=(i,), daemon=True)
               for i in range(SLOWLORIS_CLIENTS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(HEADER_TIMEOUT_S * 2 + 10)
    probes, slowest = prober.stop("slowloris")
    expect(all(t is not None for t in closed_after),
           f"slowloris: expected the gateway to close every slow connection, still open after "
           f"{HEADER_TIMEOUT_S * 2} s: {sum(t is None for t in closed_after)}")
    expect(all(HEADER_TIMEOUT_S - 1 <= t <= HEADER_TIMEOUT_S + 3 for t in closed_after),
           f"slowloris: expected each slow connection closed at its {HEADER_TIMEOUT_S} s header "
           f"timeout, closed after {sorted(round(t, 1) for t in closed_after)} s")
    log(f"slowloris: {SLOWLORIS_CLIENTS} connections sending a header byte a second closed after "
        f"{min(closed_after):.1f}-{max(closed_after):.1f} s; meanwhile {probes} normal requests "
        f"all served (slowest {slowest:.2f} s)")
    summary["slowloris"] = {"connections": SLOWLORIS_CLIENTS,
                            "closed_after_s": [round(min(closed_after), 2),
                                               round(max(closed_after), 2)],
                            "normal_requests_served": probes,
                            "slowest_normal_request_s": round(slowest, 2)}


def non_reading_body(kind):
    """(request body, completion tokens it makes): a light stream fits in the kernel's socket
    buffers (about 4 MiB a connection); a heavy one (8 choices with 20 logprobs a token, about
    6 MB) does not, so the gateway holds the rest."""
    n, max_tokens, logprobs = (1, NON_READING_TOKENS, 0) if kind == "light" else (8, 1000, 20)
    body = {"model": "tiny", "prompt": "x", "stream": True, "max_tokens": max_tokens, "n": n,
            "logprobs": logprobs, "ignore_eos": True, "stream_options": {"include_usage": True}}
    return json.dumps(body), n * max_tokens


def non_reading(cluster, gateway, worker, summary):
    rss_before = gateway.process.rss_kb()
    clients = []  # (socket, completion tokens expected)
    for kind, count in (("light", NON_READING_LIGHT), ("heavy", NON_READING_HEAVY)):
        body, tokens = non_reading_body(kind)
        for _ in range(count):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            sock.settimeout(10)
            sock.connect(("127.0.0.1", gateway.http_port))
            sock.sendall(post("/v1/completions", body))
            clients.append((sock, tokens))
    prober = Prober(gateway.http_port)
    peak = rss_before
    try:
        # The workers generate every token while no client reads.
        def generated():
            nonlocal peak
            peak = max(peak, gateway.process.rss_kb())
            text = worker.metrics()
            return (metric_sum(text, "llmserve_num_requests_running") == 0 and
                    metric_sum(text, "llmserve_num_requests_waiting") == 0 and
                    metric_sum(text, "llmserve_request_success_total") >= len(clients))

        started = time.monotonic()
        # About 40,000 tokens with logprobs: a sanitizer build takes several times longer.
        wait_until("the worker to finish the streams of the clients that do not read",
                   generated, PATIENCE_S * SANITIZER_SLOWDOWN, 0.1)
        generation_s = time.monotonic() - started
        time.sleep(0.5)
        peak = max(peak, gateway.process.rss_kb())
        probes, slowest = prober.stop("non-reading clients")
        # Now read: each stream must be complete.
        total_bytes = 0
        incomplete = []
        for sock, tokens in clients:
            pieces, tail = [], b""
            while not tail.endswith(b"0\r\n\r\n"):
                piece = sock.recv(1 << 20)
                if not piece:
                    break
                pieces.append(piece)
                tail = (tail + piece)[-16:]  # the end marker may arrive cut in two
            data = b"".join(pieces)
            total_bytes += len(data)
            text = dechunk(data.split(b"\r\n\r\n", 1)[1]).decode("utf-8", "replace")
            events = sse_events(text)
            usage = [json.loads(e)["usage"] for e in events[:-1] if '"usage":{' in e]
            if events[-1:] != ["[DONE]"] or not usage or \
                    usage[-1]["completion_tokens"] != tokens:
                incomplete.append(f"{tokens} tokens expected: {events[-2:]!r}"[:300])
        rss_after = gateway.process.rss_kb()
    finally:
        prober.stop_event.set()
        for sock, _ in clients:
            sock.close()
    growth = peak - rss_before
    bound = int(total_bytes * RSS_BYTES_FACTOR) // 1024 + RSS_SLACK_KB
    summary["non_reading"] = {"light_clients": NON_READING_LIGHT,
                              "heavy_clients": NON_READING_HEAVY,
                              "stream_bytes_total": total_bytes,
                              "generated_while_unread_s": round(generation_s, 1),
                              "gateway_rss_kb_before": rss_before, "gateway_rss_kb_peak": peak,
                              "gateway_rss_kb_after_reading": rss_after,
                              "growth_kb": growth, "bound_kb": bound,
                              "normal_requests_served": probes,
                              "slowest_normal_request_s": round(slowest, 2)}
    expect(not incomplete, f"non-reading clients: {len(incomplete)} streams were incomplete "
                           f"when their clients finally read them: {incomplete[:3]}")
    expect(growth <= bound,
           f"non-reading clients: the gateway's RSS grew by {growth} kB holding "
           f"{total_bytes} bytes of streams (bound {bound} kB)")
    log(f"non-reading clients: {len(clients)} streams ({total_bytes / 1e6:.1f} MB in all) "
        f"generated in {generation_s:.1f} s with no client reading; gateway RSS "
        f"{rss_before} -> peak {peak} kB (+{growth} kB, bound {bound} kB); {probes} normal "
        f"requests served meanwhile (slowest {slowest:.2f} s); every stream complete when read")


def run(binaries):
    started = time.monotonic()
    summary = {}
    with Cluster(*binaries, prefix="hostile") as cluster:
        channels = {}
        try:
            cluster.make_model()
            worker = cluster.start_worker("worker-0")
            # The clients that do not read keep a write to them pending while every stream is
            # generated: it must not outlast the gateway's write timeout (--http_idle_timeout,
            # 60 s by default), which a sanitizer build, several times slower, would exceed.
            gateway = cluster.start_gateway(
                [worker], f"--max_body_bytes={MAX_BODY_BYTES}",
                f"--http_idle_timeout={60 * SANITIZER_SLOWDOWN}s",
                f"--http_header_timeout={HEADER_TIMEOUT_S}s")
            cluster.wait_ready(gateway, [worker])
            channels = {"gateway": grpc_channel(gateway.grpc_port, max_message_bytes=64 << 20),
                        "worker": grpc_channel(worker.port, max_message_bytes=64 << 20)}
            run_http_table(cluster, gateway, summary)
            run_grpc_table(cluster, gateway, worker, channels, summary)
            check_protobuf_log(cluster, gateway, worker, channels, summary)
            slowloris(cluster, gateway, summary)
            non_reading(cluster, gateway, worker, summary)
            answer = post_json(gateway.http_port, "/v1/completions",
                               {"model": "tiny", "prompt": "still there?", "max_tokens": 4})
            expect(answer.status == 200, f"after it all: a completion got {answer!r}")
            expect(gateway.process.running() and worker.process.running(),
                   "after it all: a process exited\n" + cluster.report())
        except (Failure, subprocess.SubprocessError, OSError) as error:
            print(json.dumps(summary, indent=1), file=sys.stderr)
            print(f"FAIL: {error}\n{cluster.report()}", file=sys.stderr, flush=True)
            return 1
        finally:
            for channel in channels.values():
                channel.close()
    summary["seconds"] = round(time.monotonic() - started, 1)
    print("HOSTILE_INPUT_RESULT " + json.dumps(summary, indent=1), flush=True)
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
