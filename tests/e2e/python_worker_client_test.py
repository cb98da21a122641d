#!/usr/bin/python3
"""A client no one here wrote: Debian's grpcio streams from the real llmserve-worker.

Stubs are generated from proto/ at test time with protoc and Debian's grpc_python_plugin (the
protoc bundled with python3-grpc-tools 1.14 predates proto3 `optional`, which our protos use).

Usage: python_worker_client_test.py WORKER_BINARY MAKE_MODEL_BINARY PROTO_DIR
Exit 0 on success, 77 (skipped) when grpcio or the plugin is missing, 1 on failure.
"""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

SKIP = 77


def fail(message):
    print("FAIL:", message, file=sys.stderr)
    sys.exit(1)


def generate_stubs(proto_dir, out_dir):
    plugin = shutil.which("grpc_python_plugin")
    protoc = shutil.which("protoc")
    if plugin is None or protoc is None:
        print("SKIP: protoc or grpc_python_plugin not installed", file=sys.stderr)
        sys.exit(SKIP)
    subprocess.run(
        [protoc, f"-I{proto_dir}", f"--python_out={out_dir}", f"--grpc_python_out={out_dir}",
         f"--plugin=protoc-gen-grpc_python={plugin}",
         "llmserve/v1/inference.proto", "llmserve/worker/v1/worker.proto"],
        check=True)
    sys.path.insert(0, out_dir)


def wait_for_line(process, pattern, timeout_s):
    """Reads the worker's log until `pattern` matches; returns the match."""
    deadline = time.monotonic() + timeout_s
    seen = []
    os.set_blocking(process.stdout.fileno(), False)
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            if process.poll() is not None:
                break
            time.sleep(0.02)
            continue
        seen.append(line)
        match = re.search(pattern, line)
        if match:
            return match
    fail(f"worker never logged {pattern!r}; output:\n{''.join(seen)}")


def byte_decoder():
    """GPT-2's byte-level alphabet, reversed: the character of a vocabulary entry -> its byte."""
    bs = (list(range(ord("!"), ord("~") + 1)) + list(range(ord("\u00a1"), ord("\u00ac") + 1))
          + list(range(ord("\u00ae"), ord("\u00ff") + 1)))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


@contextlib.contextmanager
def served_worker(worker_binary, model, name, extra_args=(), metrics=False):
    """Starts llmserve-worker on `model` on a free loopback port and yields the port (and with
    `metrics`, the port of /metrics too); on the way out it is sent SIGTERM and must exit 0 within
    60 s."""
    worker = subprocess.Popen(
        [worker_binary, f"--model={model}", "--host=127.0.0.1", "--port=0",
         f"--metrics-port={0 if metrics else -1}", "--threads=1", "--kv-cache-memory=8MiB",
         *extra_args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        if metrics:
            ports = wait_for_line(
                worker, r" on 127\.0\.0\.1:(\d+), metrics on http://127\.0\.0\.1:(\d+)/", 60)
            yield ports.group(1), ports.group(2)
        else:
            yield wait_for_line(worker, r" on 127\.0\.0\.1:(\d+)", 60).group(1)
    finally:
        worker.send_signal(signal.SIGTERM)
        try:
            code = worker.wait(timeout=60)
        except subprocess.TimeoutExpired:
            worker.kill()
            fail(f"{name} did not exit within 60 s of SIGTERM")
    if code != 0:
        fail(f"{name} exited with {code} after SIGTERM")


def main():
    worker_binary, make_model, proto_dir = sys.argv[1:4]
    try:
        import grpc  # noqa: F401  (Debian's python3-grpcio)
    except ImportError:
        print("SKIP: python3-grpcio not installed", file=sys.stderr)
        return SKIP
    import grpc

    with tempfile.TemporaryDirectory(prefix="llmserve_py_e2e_") as temp:
        stubs = os.path.join(temp, "stubs")
        os.makedirs(stubs)
        generate_stubs(proto_dir, stubs)
        from llmserve.worker.v1 import worker_pb2, worker_pb2_grpc

        model = os.path.join(temp, "tiny")
        subprocess.run([make_model, "--preset=tiny", f"--out={model}"], check=True,
                       stdout=subprocess.DEVNULL)
        with served_worker(worker_binary, model, "worker") as port:
            channel = grpc.insecure_channel(f"127.0.0.1:{port}")
            stub = worker_pb2_grpc.WorkerStub(channel)

            info = stub.GetModelInfo(worker_pb2.GetModelInfoRequest(), timeout=30)
            if info.model_name != "tiny" or info.vocab_size == 0 or not info.tokenizer_json:
                fail(f"unexpected model info: {info.model_name} {info.vocab_size}")

            request = worker_pb2.GenerateRequest(
                request_id="py-1", prompt_token_ids=[1, 2, 3, 4, 5], max_tokens=12,
                ignore_eos=True)
            request.sampling.temperature = 0.7
            request.sampling.seed = 5
            request.sampling.top_logprobs = 2
            tokens, last = [], None
            for message in stub.Generate(request, timeout=60):
                for token in message.tokens:
                    if len(token.top_logprobs) != 2 or not token.HasField("logprob"):
                        fail(f"token without logprobs: {token}")
                    tokens.append(token.token_id)
                last = message
            if len(tokens) != 12 or any(t < 0 or t >= info.vocab_size for t in tokens):
                fail(f"bad tokens: {tokens}")
            if last.usage.completion_tokens != 12 or last.usage.prompt_tokens != 5:
                fail(f"bad usage: {last.usage}")

            # The same seed gives the same tokens.
            again = [t.token_id for m in stub.Generate(
                worker_pb2.GenerateRequest(request_id="py-2", prompt_token_ids=[1, 2, 3, 4, 5],
                                           max_tokens=12, ignore_eos=True,
                                           sampling=request.sampling), timeout=60)
                     for t in m.tokens]
            if again != tokens:
                fail(f"same seed, different tokens: {tokens} vs {again}")

            try:
                list(stub.Generate(worker_pb2.GenerateRequest(
                    request_id="py-3", prompt_token_ids=[info.vocab_size]), timeout=30))
                fail("an out-of-vocabulary id was accepted")
            except grpc.RpcError as error:
                if error.code() != grpc.StatusCode.INVALID_ARGUMENT:
                    fail(f"expected INVALID_ARGUMENT, got {error.code()}")

            # Structured outputs: whatever the random weights prefer, the output is one of the
            # choices and ends with EOS where the choice ends.
            vocab = {i: t for t, i in json.loads(info.tokenizer_json)["model"]["vocab"].items()}
            decoder = byte_decoder()
            choices = ["yes", "no", "maybe later"]
            for seed in (1, 2, 3, 4):
                constrained = worker_pb2.GenerateRequest(
                    request_id=f"py-c{seed}", prompt_token_ids=[1, 2, 3], max_tokens=40)
                constrained.sampling.seed = seed
                constrained.structured_output.choice.choices.extend(choices)
                ids = [t.token_id for m in stub.Generate(constrained, timeout=60)
                       for t in m.tokens]
                if not ids or ids[-1] not in info.eos_token_ids:
                    fail(f"constrained output did not end with EOS: {ids}")
                text = bytes(decoder[c] for i in ids[:-1] for c in vocab[i]).decode()
                if text not in choices:
                    fail(f"constrained output {text!r} is not one of {choices}")
            bad = worker_pb2.GenerateRequest(request_id="py-s", prompt_token_ids=[1, 2],
                                             max_tokens=4)
            bad.structured_output.json_schema = (
                '{"type": "object", "properties": {"age": {"type": "integer", "minimum": "x"}}}')
            try:
                list(stub.Generate(bad, timeout=30))
                fail("a malformed JSON Schema was accepted")
            except grpc.RpcError as error:
                if (error.code() != grpc.StatusCode.INVALID_ARGUMENT
                        or "age" not in error.details()):
                    fail(f"expected INVALID_ARGUMENT naming the schema path, got {error.code()}: "
                         f"{error.details()}")

            reports = stub.WatchLoad(worker_pb2.WatchLoadRequest(interval_ms=100), timeout=30)
            first = next(reports)
            if not first.reset or first.kv_blocks_total != info.num_kv_blocks:
                fail(f"bad first load report: {first}")
            reports.cancel()

            # grpc.health.v1 without its stubs: an empty HealthCheckRequest is b"", and
            # HealthCheckResponse{status: SERVING} is b"\x08\x01".
            check = channel.unary_unary("/grpc.health.v1.Health/Check")
            if check(b"", timeout=10) != b"\x08\x01":
                fail("liveness is not SERVING")
            readiness = b"\n\x19llmserve.worker.v1.Worker"
            if check(readiness, timeout=10) != b"\x08\x01":
                fail("readiness is not SERVING")
            baseline = {name: generated_tokens(stub, worker_pb2, request)
                        for name, request in speculation_requests(worker_pb2).items()}
            channel.close()
        check_speculative(worker_binary, model, worker_pb2, worker_pb2_grpc, baseline)
        # AWQ and GPTQ checkpoints written by the real llmserve-make-model serve as such.
        for method in ("awq", "gptq"):
            check_quantized(worker_binary, make_model, temp, method, worker_pb2, worker_pb2_grpc)
    print("python grpcio client: ok")
    return 0


def generated_tokens(stub, worker_pb2, request):
    return [t.token_id for m in stub.Generate(request, timeout=60) for t in m.tokens]


def speculation_requests(worker_pb2):
    """A greedy and a seeded request whose outputs (random weights loop) repeat themselves."""
    greedy = worker_pb2.GenerateRequest(request_id="py-greedy", prompt_token_ids=[5, 17, 42, 99],
                                        max_tokens=48, ignore_eos=True)
    greedy.sampling.temperature = 0
    seeded = worker_pb2.GenerateRequest(request_id="py-seeded", prompt_token_ids=[5, 17, 42, 99],
                                        max_tokens=48, ignore_eos=True)
    seeded.sampling.temperature = 0.8
    seeded.sampling.seed = 11
    seeded.sampling.top_k = 20
    return {"greedy": greedy, "seeded": seeded}


def check_speculative(worker_binary, model, worker_pb2, worker_pb2_grpc, baseline):
    """A worker with n-gram speculation, and one with the model as its own draft model (in int8),
    generate exactly what one without speculation did, and count their drafts in /metrics under
    llmserve's and vLLM's names."""
    for args in (["--speculative-method=ngram"],
                 ["--speculative-method=draft", f"--speculative-model={model}",
                  "--speculative-model-quantization=int8"]):
        check_speculative_worker(worker_binary, model, worker_pb2, worker_pb2_grpc, baseline,
                                 args + ["--num-speculative-tokens=3", "--vllm-metric-names"])


def check_speculative_worker(worker_binary, model, worker_pb2, worker_pb2_grpc, baseline, args):
    import grpc
    with served_worker(worker_binary, model, "speculative worker", args, metrics=True) as ports:
        port, metrics_port = ports
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = worker_pb2_grpc.WorkerStub(channel)
            for name, request in speculation_requests(worker_pb2).items():
                tokens = generated_tokens(stub, worker_pb2, request)
                if tokens != baseline[name]:
                    fail(f"speculation ({args[0]}) changed the {name} output: {baseline[name]} "
                         f"vs {tokens}")
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10) as r:
            text = r.read().decode()
        values = {}
        for line in text.splitlines():
            match = re.match(r"^(\S+?)(\{[^}]*\})? (\S+)$", line)
            if match and "spec_decode" in match.group(1):
                values[match.group(1) + (match.group(2) or "")] = float(match.group(3))
        accepted = values.get('llmserve_spec_decode_num_accepted_tokens_total{model="tiny"}', 0)
        drafted = values.get('llmserve_spec_decode_num_draft_tokens_total{model="tiny"}', 0)
        twin = values.get(
            'vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="tiny"}')
        if not (0 < accepted <= drafted) or twin != accepted:
            fail(f"speculative metrics ({args[0]}): {values}")


def check_quantized(worker_binary, make_model, temp, method, worker_pb2, worker_pb2_grpc):
    import grpc
    model = os.path.join(temp, f"tiny-{method}")
    subprocess.run([make_model, "--preset=tiny", f"--quantize={method}", f"--out={model}"],
                   check=True, stdout=subprocess.DEVNULL)
    with open(os.path.join(model, "config.json")) as f:
        config = json.load(f)["quantization_config"]
    if config["quant_method"] != method or config["bits"] != 4:
        fail(f"{method}: config.json says {config}")
    with served_worker(worker_binary, model, f"{method} worker") as port:
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            stub = worker_pb2_grpc.WorkerStub(channel)
            info = stub.GetModelInfo(worker_pb2.GetModelInfoRequest(), timeout=30)
            if info.quantization != method:
                fail(f"{method} worker reports quantization {info.quantization!r}")
            tokens = [t.token_id for m in stub.Generate(worker_pb2.GenerateRequest(
                request_id=f"py-{method}", prompt_token_ids=[1, 2, 3, 4, 5], max_tokens=8,
                ignore_eos=True), timeout=60) for t in m.tokens]
            if len(tokens) != 8 or any(t < 0 or t >= info.vocab_size for t in tokens):
                fail(f"{method}: bad tokens {tokens}")


if __name__ == "__main__":
    sys.exit(main())
