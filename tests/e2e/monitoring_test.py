#!/usr/bin/python3
"""The shipped monitoring against a real Prometheus (Debian's) scraping the real binaries.

A gateway and two workers run on loopback under load (completions, streams, chats, a shared
prefix, a bad key, a key over its rate limit). Prometheus discovers them the way
deploy/prometheus/prometheus-kubernetes.yml discovers pods: that file's relabel rules run
verbatim on targets that carry the pod metadata the Helm chart renders (file discovery stands in
for the Kubernetes API, which Debian's Prometheus is built without), with decoys that must be
dropped. It loads deploy/prometheus/rules/*.yml. Then:
  - discovery and relabeling give exactly the three pods, labelled component=gateway|worker;
  - every rule evaluates without error, and every metric an alert reads exists with the labels
    the alert selects and groups by;
  - every query of every dashboard in deploy/grafana/dashboards returns finite data, and every
    variable query returns the served model (and the workers);
  - killing a worker makes LlmserveWorkerDown pending (or firing) for exactly that worker.
Prints a JSON summary.

Usage: monitoring_test.py GATEWAY WORKER MAKE_MODEL SOURCE_DIR
Exit 0 on success, 77 (skipped) when prometheus or python3-yaml is missing, 1 on failure.
"""

import glob
import hashlib
import http.client
import json
import math
import os
import re
import shutil
import subprocess
import sys
import threading
import time
import urllib.parse

from e2e_support import SKIP, Cluster, Failure, exit_on_signals, free_port, http_request
from e2e_support import wait_until as wait_until_within

MODEL = "tiny"
# Windows the dashboards' $__rate_interval stands for here (scrapes every second).
RATE_INTERVAL = "30s"
PATIENCE_S = 90


def wait_until(what, predicate, timeout_s=PATIENCE_S, describe=lambda: ""):
    wait_until_within(what, predicate, timeout_s, 0.2, describe)


class Prometheus:
    def __init__(self, port):
        self.port = port

    def api(self, path, **params):
        query = urllib.parse.urlencode(params, doseq=True)
        status, body = http_request(self.port, "GET", f"/api/v1/{path}?{query}")
        reply = json.loads(body)
        if status != 200 or reply.get("status") != "success":
            raise Failure(f"Prometheus /api/v1/{path} {params}: {status} {body[:500]!r}")
        return reply["data"]

    def query(self, expr):
        return self.api("query", query=expr)["result"]


# ---- the stack ------------------------------------------------------------------------------------

def write_api_keys(temp):
    keys = {name: f"key-{name}-{os.getpid()}" for name in ("load0", "load1", "load2", "greedy")}
    path = os.path.join(temp, "api-keys")
    with open(path, "w") as f:
        for name, key in keys.items():
            f.write(f"{name} {hashlib.sha256(key.encode()).hexdigest()}\n")
    return path, keys


def start_stack(cluster):
    cluster.make_model()
    workers = []
    for index in range(2):
        worker = cluster.start_worker(f"worker-{index}")
        workers.append({"name": worker.name, "address": worker.address,
                        "metrics_port": worker.metrics_port})
    keys_file, keys = write_api_keys(cluster.temp)
    gateway = cluster.start_gateway(
        [w["address"] for w in workers], f"--api_keys_file={keys_file}",
        # 60 requests a minute per key: each load key stays under it, the greedy key goes over.
        "--rate_limit_rpm=60", metrics_port=free_port())
    wait_until("the gateway ready with both workers",
               lambda: http_request(gateway.http_port, "GET", "/readyz")[0] == 200 and all(
                   http_request(w["metrics_port"], "GET", "/metrics")[0] == 200 for w in workers),
               describe=lambda: cluster["gateway"].tail())
    return {"http_port": gateway.http_port, "metrics_port": gateway.metrics_port}, workers, keys


def pod_target(address, component, metrics_port, pod, **extra_meta):
    """A target as Kubernetes pod discovery describes one of the chart's pods."""
    labels = {
        "__meta_kubernetes_namespace": "llmserve",
        "__meta_kubernetes_pod_name": pod,
        "__meta_kubernetes_pod_label_app_kubernetes_io_part_of": "llmserve",
        "__meta_kubernetes_pod_label_app_kubernetes_io_name": "llmserve",
        "__meta_kubernetes_pod_label_app_kubernetes_io_instance": "rel",
        "__meta_kubernetes_pod_label_app_kubernetes_io_component": component,
        "__meta_kubernetes_pod_annotation_prometheus_io_scrape": "true",
        "__meta_kubernetes_pod_annotation_prometheus_io_port": str(metrics_port),
        "__meta_kubernetes_pod_annotation_prometheus_io_path": "/metrics",
        "__meta_kubernetes_pod_container_init": "false",
    }
    if component == "worker":
        labels["__meta_kubernetes_pod_label_llmserve_io_worker_group"] = "tiny"
    labels.update(extra_meta)
    return {"targets": [address], "labels": labels}


def start_prometheus(cluster, source, gateway, workers):
    import yaml

    with open(os.path.join(source, "deploy/prometheus/prometheus-kubernetes.yml")) as f:
        kubernetes = yaml.safe_load(f)
    job = kubernetes["scrape_configs"][0]
    # Discovery yields one target per container port (the gRPC port here); the relabel rules
    # move each to the annotated metrics port.
    groups = [pod_target("127.0.0.1:1", "gateway", gateway["metrics_port"], "rel-gateway-0")]
    for index, worker in enumerate(workers):
        grpc_port = worker["address"].split(":")[1]
        groups.append(pod_target(f"127.0.0.1:{grpc_port}", "worker", worker["metrics_port"],
                                 f"rel-worker-tiny-{index}"))
    # Decoys the rules must drop: an init container, another application's pod, a pod that
    # opted out of scraping.
    groups.append(pod_target("127.0.0.1:2", "worker", free_port(), "rel-worker-tiny-0",
                             __meta_kubernetes_pod_container_init="true"))
    groups.append(pod_target("127.0.0.1:3", "worker", free_port(), "other-app",
                             __meta_kubernetes_pod_label_app_kubernetes_io_part_of="other"))
    groups.append(pod_target("127.0.0.1:4", "worker", free_port(), "rel-opted-out",
                             __meta_kubernetes_pod_annotation_prometheus_io_scrape="false"))
    targets_file = os.path.join(cluster.temp, "pods.json")
    with open(targets_file, "w") as f:
        json.dump(groups, f)
    scrape = {
        "job_name": job["job_name"],
        "scrape_interval": "1s",
        "scrape_timeout": "1s",  # a scrape the loaded machine misses is retried a second later
        "file_sd_configs": [{"files": [targets_file]}],
        "relabel_configs": job["relabel_configs"],
    }
    rules = sorted(glob.glob(os.path.join(source, "deploy/prometheus/rules/*.yml")))
    config = {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
              "rule_files": rules, "scrape_configs": [scrape]}
    config_file = os.path.join(cluster.temp, "prometheus.yml")
    with open(config_file, "w") as f:
        yaml.safe_dump(config, f)
    port = free_port()
    cluster.start("prometheus", [
        shutil.which("prometheus"), f"--config.file={config_file}",
        f"--storage.tsdb.path={os.path.join(cluster.temp, 'tsdb')}",
        f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"])
    prometheus = Prometheus(port)
    wait_until("Prometheus to answer", lambda: http_request(port, "GET", "/-/ready")[0] == 200,
               describe=lambda: cluster["prometheus"].tail())
    return prometheus, rules


# ---- load -----------------------------------------------------------------------------------------

class Load:
    """Client threads through the gateway's OpenAI API until stopped; counts outcomes."""

    def __init__(self, port, keys):
        self.port = port
        self.keys = keys
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.statuses = {}
        self.threads = []

    def count(self, kind, status):
        with self.lock:
            self.statuses[f"{kind} {status}"] = self.statuses.get(f"{kind} {status}", 0) + 1

    def post(self, path, body, key):
        headers = {"content-type": "application/json", "authorization": f"Bearer {key}"}
        return http_request(self.port, "POST", path, json.dumps(body), headers)

    def steady(self, index):
        prefix = "You are a helpful assistant. Answer briefly and precisely. " * 4
        key = self.keys[f"load{index}"]
        n = 0
        while not self.stop.is_set():
            n += 1
            kind = n % 3
            if kind == 0:
                status, _ = self.post("/v1/completions", {
                    "model": MODEL, "prompt": f"{prefix}Question {index}-{n}?", "max_tokens": 8,
                    "ignore_eos": True}, key)
                self.count("completion", status)
            elif kind == 1:
                status, body = self.post("/v1/completions", {
                    "model": MODEL, "prompt": f"story {index} {n}", "max_tokens": 12,
                    "ignore_eos": True, "stream": True}, key)
                self.count("stream", status if b"[DONE]" in body else f"{status}-incomplete")
            else:
                status, _ = self.post("/v1/chat/completions", {
                    "model": MODEL, "max_tokens": 6, "ignore_eos": True,
                    "messages": [{"role": "user", "content": f"hello {n}"}]}, key)
                self.count("chat", status)
            # Under one request a second: each key stays within its rate limit.
            self.stop.wait(1.1)

    def hostile(self):
        while not self.stop.is_set():
            status, _ = self.post("/v1/completions", {"model": MODEL, "prompt": "x"},
                                  "not-a-key")
            self.count("bad-key", status)
            # Over 60 a minute: the greedy key is refused (429) once its burst is spent.
            for _ in range(10):
                status, _ = self.post("/v1/completions", {
                    "model": MODEL, "prompt": "y", "max_tokens": 1}, self.keys["greedy"])
                self.count("greedy", status)
            self.stop.wait(0.5)

    def start(self):
        for target, args in ((self.steady, (0,)), (self.steady, (1,)), (self.steady, (2,)),
                             (self.hostile, ())):
            thread = threading.Thread(target=self.guarded, args=(target, args), daemon=True)
            thread.start()
            self.threads.append(thread)

    def guarded(self, target, args):
        try:
            target(*args)
        except (OSError, http.client.HTTPException) as e:
            self.count("client-error", type(e).__name__)
            if not self.stop.is_set():
                self.stop.wait(0.2)
                self.guarded(target, args)

    def finish(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=60)


# ---- checks ---------------------------------------------------------------------------------------

def check_targets(prometheus, gateway, workers):
    def active():
        return prometheus.api("targets", state="active")["activeTargets"]

    expected = {f"127.0.0.1:{gateway['metrics_port']}": "gateway"}
    expected.update({f"127.0.0.1:{w['metrics_port']}": "worker" for w in workers})

    seen_up = set()

    def all_seen_up():
        targets = active()
        if {t["labels"].get("instance") for t in targets} != set(expected):
            return False
        seen_up.update(t["labels"]["instance"] for t in targets if t["health"] == "up")
        return seen_up == set(expected)

    wait_until("relabeling keeps exactly the three pods (dropping the decoys), each scraped",
               all_seen_up, describe=lambda: json.dumps(active(), indent=1)[:3000])
    for target in active():
        labels = target["labels"]
        instance = labels.get("instance")
        if expected.get(instance) != labels.get("component"):
            raise Failure(f"target {instance} labelled {labels}; expected component "
                          f"{expected.get(instance)}")
        for name, value in (("namespace", "llmserve"), ("release", "rel")):
            if labels.get(name) != value:
                raise Failure(f"target {instance}: label {name}={labels.get(name)!r}")
        if labels["component"] == "worker" and labels.get("worker_group") != "tiny":
            raise Failure(f"worker target {instance} lacks worker_group: {labels}")
    return len(expected)


SELECTOR = re.compile(r"\b(llmserve_[a-z0-9_]+|up)\b(\{[^}]*\})?")
MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)")
GROUPING = re.compile(r"\b(?:by|on)\s*\(([^)]*)\)")


def check_rules(prometheus, rules_files):
    import yaml

    def evaluated():
        groups = prometheus.api("rules")["groups"]
        rules = [rule for group in groups for rule in group["rules"]]
        return rules and all(rule.get("lastEvaluation", "").startswith("20") for rule in rules)

    wait_until("every rule is evaluated", evaluated)
    groups = prometheus.api("rules")["groups"]
    loaded = {rule["name"]: rule for group in groups for rule in group["rules"]}
    problems = [f"{name}: health {rule['health']} {rule.get('lastError', '')}"
                for name, rule in loaded.items() if rule["health"] != "ok"]
    shipped = []
    for path in rules_files:
        with open(path) as f:
            for group in yaml.safe_load(f)["groups"]:
                shipped.extend(group["rules"])
    for rule in shipped:
        name = rule.get("alert") or rule.get("record")
        if name not in loaded:
            problems.append(f"{name}: not loaded by Prometheus")
        if "alert" not in rule:
            continue
        expr = rule["expr"]
        labels_of = {}  # metric -> the label names its series carry
        for metric, matchers in SELECTOR.findall(expr):
            if metric not in labels_of:
                series = prometheus.api("series", **{"match[]": metric})
                labels_of[metric] = set().union(*(s.keys() for s in series)) if series else None
            if labels_of[metric] is None:
                problems.append(f"{name}: reads {metric}, which no target exports")
                continue
            for label, _ in MATCHER_LABEL.findall(matchers):
                if label not in labels_of[metric]:
                    problems.append(f"{name}: selects {metric} on {label}, a label it lacks")
        # `by (...)` labels must come from some metric of the expression.
        present = set().union(*(labels for labels in labels_of.values() if labels))
        for grouping in GROUPING.findall(expr):
            for label in (part.strip() for part in grouping.split(",")):
                if label and label != "le" and label not in present:
                    problems.append(f"{name}: groups by {label}, which none of its metrics has")
    if problems:
        raise Failure("rules:\n  " + "\n  ".join(problems))
    return len(shipped)


def dashboard_queries(source):
    """(dashboard, panel, expr) for every target, and (dashboard, variable, query) for every
    query variable, of every shipped dashboard."""
    targets, variables = [], []
    for path in sorted(glob.glob(os.path.join(source, "deploy/grafana/dashboards/*.json"))):
        with open(path) as f:
            dashboard = json.load(f)
        title = dashboard["title"]
        panels = list(dashboard["panels"])
        for panel in panels:
            panels.extend(panel.get("panels", []))
            for target in panel.get("targets", []):
                targets.append((title, panel["title"], target["expr"]))
        for variable in dashboard["templating"]["list"]:
            if variable["type"] == "query":
                variables.append((title, variable["name"], variable["query"]["query"]))
    return targets, variables


def substitute(expr):
    return (expr.replace("$__rate_interval", RATE_INTERVAL).replace('"$model"', f'"{MODEL}"')
            .replace('"$worker"', '".*"'))


# Dashboard (title after "llmserve / ") -> panels whose queries the load makes positive.
PANELS_THE_LOAD_MOVES = {
    "Gateway": ("Requests/s by API and status", "Time to first token (gateway)",
                "Inter-token latency (gateway)", "Request duration (gateway)",
                "Routing decisions/s by reason", "Workers up", "Ready workers per model",
                "Refused on limits/s", "Auth failures/s"),
    "Overview": ("Requests/s", "Generated tokens/s", "Ready workers", "Requests/s by status",
                 "Tokens/s", "Time to first token", "Inter-token latency", "End-to-end latency"),
    "Workers": ("Step time", "Tokens per step", "Steps/s", "Finished requests/s",
                "Time to first token (per worker)", "Tokens/s per worker", "Tokens per request"),
}


def check_load(statuses):
    """What the load's own counts must show: each kind of request served, the bad key refused with
    401 only, the greedy key past its limit refused with 429."""
    for kind in ("completion", "stream", "chat"):
        if statuses.get(f"{kind} 200", 0) == 0:
            raise Failure(f"no {kind} request was served: {statuses}")
    bad_key = {k: v for k, v in statuses.items() if k.startswith("bad-key ")}
    if not bad_key or set(bad_key) != {"bad-key 401"}:
        raise Failure(f"the bad key got {bad_key or 'nothing'}, not only 401: {statuses}")
    if statuses.get("greedy 429", 0) == 0:
        raise Failure(f"the greedy key was never refused (429): {statuses}")


def check_dashboards(prometheus, source, workers):
    targets, variables = dashboard_queries(source)
    if len(targets) < 30:
        raise Failure(f"only {len(targets)} dashboard queries found")

    def finite(result):
        return any(math.isfinite(float(sample["value"][1])) for sample in result)

    # A loaded machine can miss a scrape, which leaves gauges stale for a moment: each query must
    # return finite data at some point, not all of them at the same instant.
    failing = list(targets)

    def all_have_data():
        failing[:] = [(title, panel, expr) for title, panel, expr in failing
                      if not finite(prometheus.query(substitute(expr)))]
        return not failing

    wait_until("every dashboard query returns finite data", all_have_data,
               describe=lambda: "no data:\n  " + "\n  ".join(
                   f"{title} / {panel}: {expr}" for title, panel, expr in failing))

    # Finite is not enough: a query of the wrong metric or label can return a constant zero. The
    # panels that the load moves (requests, tokens, latencies, steps, 401s of the bad key and
    # 429s of the greedy one, workers up) must each show a positive value at some point.
    def positive(result):
        return any(float(sample["value"][1]) > 0 for sample in result)

    flat = [(title, panel, expr) for title, panel, expr in targets
            if panel in PANELS_THE_LOAD_MOVES.get(title.split(" / ")[-1], ())]
    missing = {(title.split(" / ")[-1], panel)
               for title, panels in PANELS_THE_LOAD_MOVES.items() for panel in panels} - {
                   (title.split(" / ")[-1], panel) for title, panel, _ in flat}
    if missing:
        raise Failure(f"panels this test expects are not on the dashboards: {sorted(missing)}")
    failing[:] = flat

    def all_positive():
        failing[:] = [(title, panel, expr) for title, panel, expr in failing
                      if not positive(prometheus.query(substitute(expr)))]
        return not failing

    wait_until("every panel the load moves shows a positive value", all_positive,
               describe=lambda: "zero or no data:\n  " + "\n  ".join(
                   f"{title} / {panel}: {expr}" for title, panel, expr in failing))
    label_values = re.compile(r"^label_values\((.*),\s*([a-zA-Z_]+)\)$")
    for title, name, query in variables:
        match = label_values.match(query)
        if not match:
            raise Failure(f"{title}: variable {name}: not label_values(METRIC, LABEL): {query}")
        values = prometheus.api(f"label/{match.group(2)}/values",
                                **{"match[]": substitute(match.group(1))})
        if name == "model" and MODEL not in values:
            raise Failure(f"{title}: variable model lists {values}, not {MODEL}")
        if name == "worker" and not all(f"127.0.0.1:{w['metrics_port']}" in values
                                        for w in workers):
            raise Failure(f"{title}: variable worker lists {values}")
    return len(targets), len(variables)


def check_worker_down_alert(prometheus, cluster, victim):
    cluster.stop(victim["name"])

    def alerts():
        return [a for a in prometheus.api("alerts")["alerts"]
                if a["labels"]["alertname"] == "LlmserveWorkerDown"]

    wait_until(f"LlmserveWorkerDown is pending for {victim['address']}",
               lambda: any(a["labels"].get("worker") == victim["address"] and
                           a["state"] in ("pending", "firing") for a in alerts()),
               timeout_s=60, describe=lambda: json.dumps(alerts(), indent=1))
    others = [a for a in alerts() if a["labels"].get("worker") != victim["address"]]
    if others:
        raise Failure(f"LlmserveWorkerDown for a worker that is up: {others}")
    return alerts()[0]


def main():
    gateway_bin, worker_bin, make_model = sys.argv[1:4]
    source = os.path.abspath(sys.argv[4])
    if shutil.which("prometheus") is None:
        print("SKIP: prometheus is not installed (Debian package prometheus)", file=sys.stderr)
        return SKIP
    try:
        import yaml  # noqa: F401  (Debian's python3-yaml)
    except ImportError:
        print("SKIP: python3-yaml is not installed", file=sys.stderr)
        return SKIP
    started = time.monotonic()
    exit_on_signals()
    load = None
    with Cluster(gateway_bin, worker_bin, make_model, "monitoring") as cluster:
        try:
            gateway, workers, keys = start_stack(cluster)
            prometheus, rules_files = start_prometheus(cluster, source, gateway, workers)
            load = Load(gateway["http_port"], keys)
            load.start()
            num_targets = check_targets(prometheus, gateway, workers)
            num_queries, num_variables = check_dashboards(prometheus, source, workers)
            num_rules = check_rules(prometheus, rules_files)
            alert = check_worker_down_alert(prometheus, cluster, workers[1])
            load.finish()
            check_load(load.statuses)
            print(json.dumps({
                "targets": num_targets, "rules": num_rules, "dashboard_queries": num_queries,
                "dashboard_variables": num_variables,
                "worker_down_alert": {"state": alert["state"], "labels": alert["labels"]},
                "requests": load.statuses, "seconds": round(time.monotonic() - started, 1),
            }, indent=1, sort_keys=True))
            return 0
        except (Failure, subprocess.SubprocessError, OSError) as e:
            print(f"FAIL: {e}", file=sys.stderr)
            print(cluster.report(15), file=sys.stderr)
            if load is not None:
                print(f"requests: {load.statuses}", file=sys.stderr)
            return 1
        finally:
            if load is not None:
                load.stop.set()


if __name__ == "__main__":
    sys.exit(main())
