#!/usr/bin/python3
"""deploy/docker-compose.yml, checked without a Docker engine.

docker-compose (Debian's, v1.29) parses the file and resolves its defaults the way `docker compose
up` would; the test then checks what the file promises (hardened services, loopback ports, a
grace period covering the drain, workers sharing the DNS name the gateway resolves, mounts that
exist) and runs the model, worker and gateway commands exactly as written there against the real
binaries, substituting only paths, ports and the worker DNS name.

Usage: compose_test.py SOURCE_DIR GATEWAY WORKER MAKE_MODEL WORK_DIR
Exit 77 (skipped) when docker-compose is not installed.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

PATIENCE_S = 60


def fail(message):
    print(f"FAIL: {message}")
    sys.exit(1)


def duration_seconds(text):
    match = re.fullmatch(r"(?:(\d+)m)?(?:(\d+)s)?", str(text))
    if not match or not any(match.groups()):
        fail(f"cannot read the duration {text!r}")
    return int(match.group(1) or 0) * 60 + int(match.group(2) or 0)


def flag_value(command, name):
    for arg in command:
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
    return None


def wait_for_line(process, log_path, pattern):
    deadline = time.time() + PATIENCE_S
    while time.time() < deadline:
        with open(log_path, encoding="utf-8", errors="replace") as log:
            match = re.search(pattern, log.read())
        if match:
            return match
        if process.poll() is not None:
            break
        time.sleep(0.1)
    with open(log_path, encoding="utf-8", errors="replace") as log:
        fail(f"no line matching {pattern!r}; the process said:\n{log.read()[-3000:]}")


def http(url, body=None, timeout=30):
    request = urllib.request.Request(url, data=body, method="POST" if body else "GET")
    if body:
        request.add_header("content-type", "application/json")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()
    except (urllib.error.URLError, OSError) as error:
        return 0, str(error)


def check_file(config, source):
    services = config["services"]
    for name in ("model", "worker-1", "worker-2", "gateway"):
        if name not in services:
            fail(f"no service {name}")
        service = services[name]
        # As the Helm chart runs them (and as the images are built to allow).
        if service.get("user") != "10001:10001":
            fail(f"{name}: user is {service.get('user')!r}, not 10001:10001")
        if service.get("read_only") is not True:
            fail(f"{name}: the root filesystem is not read-only")
        if "/tmp" not in service.get("tmpfs", []):
            fail(f"{name}: no tmpfs at /tmp (the only place the images write)")
        if service.get("cap_drop") != ["ALL"]:
            fail(f"{name}: capabilities are not all dropped")
        if "no-new-privileges:true" not in service.get("security_opt", []):
            fail(f"{name}: no-new-privileges is not set")
    for name, service in services.items():
        for port in service.get("ports", []):
            if not str(port).startswith("127.0.0.1:"):
                fail(f"{name}: port {port} is published beyond loopback")
        for volume in service.get("volumes", []):
            host = str(volume).split(":", 1)[0]
            if host.startswith("/") and not os.path.exists(host):
                fail(f"{name}: mounts {host}, which is not in the repository")
    gateway = services["gateway"]
    drain = duration_seconds(flag_value(gateway["command"], "drain_timeout"))
    if duration_seconds(gateway["stop_grace_period"]) < drain + 5:
        fail("gateway: stop_grace_period does not cover --drain_timeout + 5 s")
    dns = flag_value(gateway["command"], "worker_dns")
    if dns is None:
        fail("gateway: no --worker_dns")
    dns_name, dns_port = dns.rsplit(":", 1)
    for name in ("worker-1", "worker-2"):
        worker = services[name]
        if dns_name not in worker["networks"]["default"]["aliases"]:
            fail(f"{name}: not reachable as {dns_name}, the name the gateway resolves")
        port = flag_value(worker["command"], "port") or "50051"
        if port != dns_port:
            fail(f"{name}: listens on {port}, the gateway dials {dns_port}")
        drain = duration_seconds(flag_value(worker["command"], "drain_timeout"))
        if duration_seconds(worker["stop_grace_period"]) < drain + 5:
            fail(f"{name}: stop_grace_period does not cover --drain_timeout + 5 s")
        if worker["depends_on"]["model"]["condition"] != "service_completed_successfully":
            fail(f"{name}: does not wait for the model")
    prometheus_config = os.path.join(source, "deploy/prometheus/prometheus-compose.yml")
    with open(prometheus_config, encoding="utf-8") as config_file:
        text = config_file.read()
    if f"names: [\"{dns_name}\"]" not in text or "port: 9400" not in text:
        fail("prometheus-compose.yml does not discover the workers by their DNS name and port 9400")
    promtool = shutil.which("promtool")
    if promtool:
        subprocess.run([promtool, "check", "config", "--syntax-only", prometheus_config],
                       check=True)
    else:
        print("note: promtool is not installed; prometheus-compose.yml is not checked by it")


def run_commands(config, gateway_binary, worker_binary, make_model, work):
    services = config["services"]
    models = os.path.join(work, "models")
    os.makedirs(models, exist_ok=True)
    processes = []

    def start(argv, log_name):
        log_path = os.path.join(work, log_name)
        log = open(log_path, "w", encoding="utf-8")
        processes.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT))
        return processes[-1], log_path

    try:
        # The model service: its script as written, with the image's paths replaced.
        model = services["model"]
        entrypoint = [arg.replace("/models", models) for arg in model["entrypoint"]]
        entrypoint = [arg.replace("llmserve-make-model", make_model) for arg in entrypoint]
        for attempt in ("generates", "leaves alone"):
            started = time.time()
            subprocess.run(entrypoint, check=True, timeout=PATIENCE_S)
            print(f"model service {attempt} the model in {time.time() - started:.1f} s")
        worker_command = services["worker-1"]["command"]
        model_dir = flag_value(worker_command, "model").replace("/models", models)
        if not os.path.isfile(os.path.join(model_dir, "config.json")):
            fail(f"the workers' --model {model_dir} is not where the model service wrote it")

        # A worker with the file's flags; later flags win in absl, so ports and host are appended.
        worker_argv = [worker_binary] + [arg.replace("/models", models) for arg in worker_command]
        worker_argv += ["--host=127.0.0.1", "--port=0", "--metrics_port=0"]
        worker, worker_log = start(worker_argv, "worker.log")
        worker_port = wait_for_line(worker, worker_log, r" on 127\.0\.0\.1:(\d+)").group(1)

        gateway_command = [
            f"--worker_dns=localhost:{worker_port}" if arg.startswith("--worker_dns=") else arg
            for arg in services["gateway"]["command"]
        ]
        gateway_argv = [gateway_binary] + gateway_command
        gateway_argv += ["--host=127.0.0.1", "--grpc_port=0", "--http_port=0"]
        gateway, gateway_log = start(gateway_argv, "gateway.log")
        http_port = wait_for_line(gateway, gateway_log,
                                  r"HTTP on http://127\.0\.0\.1:(\d+)").group(1)
        wait_for_line(gateway, gateway_log, r"gateway: ready")
        base = f"http://127.0.0.1:{http_port}"
        status, body = http(f"{base}/readyz")
        if status != 200:
            fail(f"/readyz answered {status}: {body}")
        model_name = flag_value(worker_command, "served_model_name")
        status, body = http(f"{base}/v1/completions",
                            json.dumps({"model": model_name, "prompt": "Hello",
                                        "max_tokens": 4}).encode())
        if status != 200 or json.loads(body)["usage"]["completion_tokens"] != 4:
            fail(f"a completion through the compose flags answered {status}: {body}")
        print(f"gateway and worker with the compose flags served a completion of {model_name}")

        for process in (gateway, worker):
            process.send_signal(signal.SIGTERM)
            code = process.wait(timeout=PATIENCE_S)
            if code != 0:
                fail(f"{process.args[0]} exited {code} after SIGTERM")
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def main():
    if len(sys.argv) != 6:
        print(__doc__)
        return 2
    source, gateway_binary, worker_binary, make_model, work = sys.argv[1:]
    compose = shutil.which("docker-compose")
    if compose is None:
        print("SKIP: docker-compose is not installed (scripts/install-deps.sh installs it)")
        return 77
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    env = {key: value for key, value in os.environ.items() if not key.startswith("LLMSERVE_")}
    result = subprocess.run([compose, "-f", os.path.join(source, "deploy/docker-compose.yml"),
                             "config"], env=env, capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        fail(f"docker-compose config refused the file:\n{result.stderr}")
    import yaml  # python3-yaml, a dependency of docker-compose

    config = yaml.safe_load(result.stdout)
    check_file(config, source)
    run_commands(config, gateway_binary, worker_binary, make_model, work)
    print("compose_test: passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
