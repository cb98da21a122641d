#!/usr/bin/env python3
"""Writes llmserve's Grafana dashboards (deploy/grafana/dashboards/*.json) from one description.

The JSON files are what Grafana, Compose and the Helm chart load; this script is where they are
edited, so the three dashboards share their layout, units, variables and data source. After a
change run it and commit both: `python3 deploy/grafana/generate_dashboards.py` (the monitoring
tests fail when the JSON and this script disagree, and they run every query against a real
Prometheus).

Usage: generate_dashboards.py [OUT_DIR]   (default: the dashboards folder next to this script)
"""

import json
import os
import sys

DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
# Every panel filters by these (multi-value, "All" = any).
MODEL = 'model=~"$model"'
WORKER = 'model=~"$model",instance=~"$worker"'
RATE = "$__rate_interval"


def target(expr, legend, ref):
    return {"datasource": DATASOURCE, "expr": expr, "legendFormat": legend, "refId": ref}


def timeseries(title, description, unit, targets, width=12, stack=False, minimum=0):
    defaults = {"unit": unit, "min": minimum, "custom": {"fillOpacity": 10, "showPoints": "never"}}
    if stack:
        defaults["custom"]["stacking"] = {"mode": "normal", "group": "A"}
    return {
        "type": "timeseries",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {"defaults": defaults, "overrides": []},
        "options": {
            "legend": {"displayMode": "list", "placement": "bottom", "showLegend": True},
            "tooltip": {"mode": "multi", "sort": "desc"},
        },
        "targets": [target(e, l, chr(ord("A") + i)) for i, (e, l) in enumerate(targets)],
        "_width": width,
        "_height": 8,
    }


def stat(title, description, unit, expr, thresholds=None, width=4):
    # (value, color) steps above a green base; a None value recolors the base.
    steps = [{"color": "green", "value": None}]
    for value, color in thresholds or []:
        if value is None:
            steps[0]["color"] = color
        else:
            steps.append({"color": color, "value": value})
    return {
        "type": "stat",
        "title": title,
        "description": description,
        "datasource": DATASOURCE,
        "fieldConfig": {
            "defaults": {"unit": unit, "thresholds": {"mode": "absolute", "steps": steps}},
            "overrides": [],
        },
        "options": {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
                    "colorMode": "background", "graphMode": "area", "textMode": "value"},
        "targets": [target(expr, "", "A")],
        "_width": width,
        "_height": 4,
    }


def row(title):
    return {"type": "row", "title": title, "collapsed": False, "panels": [], "_width": 24,
            "_height": 1}


def quantiles(bucket_rate, by, label_prefix=""):
    """p50/p90/p99 of a histogram from its bucket rates (an expression summed by `by`, le)."""
    by_le = ", ".join([*by, "le"])
    return [(f"histogram_quantile({q}, sum by ({by_le}) ({bucket_rate}))",
             f"{label_prefix}p{int(q * 100)}") for q in (0.5, 0.9, 0.99)]


def variable_datasource():
    return {"name": "datasource", "label": "Data source", "type": "datasource",
            "query": "prometheus", "current": {}, "hide": 0, "refresh": 1, "regex": ""}


def variable_query(name, label, query):
    return {"name": name, "label": label, "type": "query", "datasource": DATASOURCE,
            "query": {"query": query, "refId": name}, "definition": query, "refresh": 2,
            "includeAll": True, "multi": True, "allValue": ".*", "current": {}, "sort": 1,
            "hide": 0, "regex": ""}


def layout(panels):
    """Places panels left to right in a 24-column grid, wrapping rows; gives them ids."""
    x = y = line_height = 0
    for panel_id, panel in enumerate(panels, start=1):
        width, height = panel.pop("_width"), panel.pop("_height")
        if x + width > 24 or panel["type"] == "row":
            x, y, line_height = 0, y + line_height, 0
        panel["id"] = panel_id
        panel["gridPos"] = {"h": height, "w": width, "x": x, "y": y}
        x += width
        line_height = max(line_height, height)
        if panel["type"] == "row":
            x, y, line_height = 0, y + height, 0
    return panels


def dashboard(uid, title, description, variables, panels):
    return {
        "uid": uid,
        "title": title,
        "description": description,
        "tags": ["llmserve"],
        "editable": True,
        "graphTooltip": 1,
        "refresh": "30s",
        "schemaVersion": 39,
        "version": 1,
        "time": {"from": "now-1h", "to": "now"},
        "timepicker": {},
        "timezone": "browser",
        "annotations": {"list": []},
        "links": [{"type": "dashboards", "tags": ["llmserve"], "asDropdown": True,
                   "title": "llmserve", "includeVars": True, "keepTime": True}],
        "templating": {"list": variables},
        "panels": layout(panels),
    }


def overview():
    ttft = f"model_le:llmserve_time_to_first_token_seconds_bucket:rate5m{{{MODEL}}}"
    itl = f"model_le:llmserve_inter_token_latency_seconds_bucket:rate5m{{{MODEL}}}"
    e2e = f"model_le:llmserve_e2e_request_latency_seconds_bucket:rate5m{{{MODEL}}}"
    errors = (f"(sum(model:llmserve_gateway_request_errors:rate5m{{{MODEL}}}) or vector(0))"
              f" / sum(model:llmserve_gateway_requests:rate5m{{{MODEL}}})")
    panels = [
        stat("Requests/s", "Requests that ended at the gateways, all status codes (5 min rate).",
             "reqps", f"sum(model:llmserve_gateway_requests:rate5m{{{MODEL}}})"),
        stat("Server errors", "Share of requests that ended in a server error (5xx / gRPC "
             "internal, unavailable, unknown, data loss, deadline exceeded), 5 min.",
             "percentunit", errors, [(0.01, "orange"), (0.05, "red")]),
        stat("Generated tokens/s", "Tokens generated by all workers (5 min rate).", "short",
             f"sum(model:llmserve_generation_tokens:rate5m{{{MODEL}}})"),
        stat("Ready workers", "Workers the gateways can route to (the gateway that sees the "
             "most, per model).", "short",
             f"sum(max by (model) (llmserve_gateway_model_ready_workers{{{MODEL}}}))",
             [(None, "red"), (1, "green")]),
        stat("Waiting requests", "Requests queued on the workers for a batch slot.", "short",
             f"sum(model:llmserve_num_requests_waiting:sum{{{MODEL}}})",
             [(1, "orange"), (10, "red")]),
        stat("Alerts firing", "llmserve alerts firing now (deploy/prometheus/rules/alerts.yml).",
             "short", 'count(ALERTS{alertname=~"Llmserve.*",alertstate="firing"}) or vector(0)',
             [(1, "red")]),
        row("Traffic"),
        timeseries("Requests/s by status", "Requests that ended at the gateways, by gRPC status "
                   "code name (ok; client errors such as invalid_argument, unauthenticated, "
                   "resource_exhausted; server errors such as unavailable, internal).", "reqps",
                   [(f"sum by (code) (model_code:llmserve_gateway_requests:rate5m{{{MODEL}}})",
                     "{{code}}")], stack=True),
        timeseries("Tokens/s", "Prompt tokens processed (prefill, cached ones excluded) and "
                   "tokens generated, all workers.", "short",
                   [(f"sum by (model) (model:llmserve_prompt_tokens:rate5m{{{MODEL}}})",
                     "prompt {{model}}"),
                    (f"sum by (model) (model:llmserve_generation_tokens:rate5m{{{MODEL}}})",
                     "generated {{model}}")]),
        row("Latency (workers)"),
        timeseries("Time to first token", "Arrival at the worker to its first generated token.",
                   "s", quantiles(ttft, []), width=8),
        timeseries("Inter-token latency", "Gap between two generated tokens of a request.", "s",
                   quantiles(itl, []), width=8),
        timeseries("End-to-end latency", "Arrival at the worker to the request's end.", "s",
                   quantiles(e2e, []), width=8),
        row("Load and cache"),
        timeseries("Running and waiting requests", "Requests in the workers' running batches "
                   "and waiting for a slot (including preempted ones).", "short",
                   [(f"sum by (model) (model:llmserve_num_requests_running:sum{{{MODEL}}})",
                     "running {{model}}"),
                    (f"sum by (model) (model:llmserve_num_requests_waiting:sum{{{MODEL}}})",
                     "waiting {{model}}")], width=6),
        timeseries("KV cache usage", "Share of KV cache blocks held by requests: the fullest "
                   "worker and the average.", "percentunit",
                   [(f"max by (model) (llmserve_kv_cache_usage_ratio{{{MODEL}}})",
                     "max {{model}}"),
                    (f"model:llmserve_kv_cache_usage_ratio:avg{{{MODEL}}}", "avg {{model}}")],
                   width=6),
        timeseries("Prefix-cache hit rate", "Prompt tokens served from the prefix cache, of the "
                   "prompt tokens looked up.", "percentunit",
                   [(f"model:llmserve_prefix_cache_hit_ratio:rate5m{{{MODEL}}}", "{{model}}")],
                   width=6),
        timeseries("Preemptions/s", "Requests whose KV cache was dropped to make room "
                   "(recomputed later).", "short",
                   [(f"model:llmserve_num_preemptions:rate5m{{{MODEL}}}", "{{model}}")],
                   width=6),
    ]
    return dashboard("llmserve-overview", "llmserve / Overview",
                     "Traffic, latency, load and cache of every model llmserve serves.",
                     [variable_datasource(),
                      variable_query("model", "Model",
                                     "label_values(llmserve_num_requests_running, model)")],
                     panels)


def worker():
    def per_worker(metric):
        return f"sum by (instance, le) (rate({metric}_bucket{{{WORKER}}}[{RATE}]))"

    def by_worker(expr_template, legend="{{instance}}"):
        return [(expr_template, legend)]

    panels = [
        row("Engine steps"),
        timeseries("Step time", "Wall time of one engine step (schedule, forward pass, sample, "
                   "update), per worker.", "s",
                   [(f"histogram_quantile({q}, {per_worker('llmserve_step_duration_seconds')})",
                     f"p{int(q * 100)} {{{{instance}}}}") for q in (0.5, 0.99)], width=8),
        timeseries("Tokens per step", "Average tokens in one step (prompt chunks plus decodes): "
                   "how full the batches are.", "short",
                   by_worker(f"sum by (instance) (rate(llmserve_iteration_tokens_sum{{{WORKER}}}"
                             f"[{RATE}])) / sum by (instance) (rate(llmserve_iteration_tokens_count"
                             f"{{{WORKER}}}[{RATE}]))"), width=8),
        timeseries("Steps/s", "Engine steps per second, per worker.", "short",
                   by_worker(f"sum by (instance) (rate(llmserve_step_duration_seconds_count"
                             f"{{{WORKER}}}[{RATE}]))"), width=8),
        row("Requests"),
        timeseries("Queue time", "Arrival to the first forward pass that included the request.",
                   "s",
                   [(f"histogram_quantile({q}, "
                     f"{per_worker('llmserve_request_queue_time_seconds')})",
                     f"p{int(q * 100)} {{{{instance}}}}") for q in (0.5, 0.99)], width=8),
        timeseries("Running and waiting", "Requests in the batch and waiting, per worker.",
                   "short",
                   [(f"sum by (instance) (llmserve_num_requests_running{{{WORKER}}})",
                     "running {{instance}}"),
                    (f"sum by (instance) (llmserve_num_requests_waiting{{{WORKER}}})",
                     "waiting {{instance}}")], width=8),
        timeseries("Finished requests/s", "Requests that ended, by finish reason (stop, length, "
                   "abort) and worker.", "reqps",
                   [(f"sum by (instance, finished_reason) (rate(llmserve_request_success_total"
                     f"{{{WORKER}}}[{RATE}]))", "{{finished_reason}} {{instance}}")],
                   width=8, stack=True),
        timeseries("Failed requests/s", "Requests a worker refused or failed, by gRPC code "
                   "(0 when there are none).", "reqps",
                   [(f"sum by (instance, code) (rate(llmserve_request_failure_total{{{WORKER}}}"
                     f"[{RATE}])) or on() vector(0)", "{{code}} {{instance}}")], width=8),
        timeseries("Time to first token (per worker)", "p90 of arrival to first token.", "s",
                   [(f"histogram_quantile(0.9, "
                     f"{per_worker('llmserve_time_to_first_token_seconds')})",
                     "{{instance}}")], width=8),
        timeseries("Inter-token latency (per worker)", "p90 of the gap between tokens.", "s",
                   [(f"histogram_quantile(0.9, "
                     f"{per_worker('llmserve_inter_token_latency_seconds')})",
                     "{{instance}}")], width=8),
        row("Tokens and cache"),
        timeseries("Tokens/s per worker", "Prompt tokens processed and tokens generated.",
                   "short",
                   [(f"sum by (instance) (rate(llmserve_prompt_tokens_total{{{WORKER}}}"
                     f"[{RATE}]))", "prompt {{instance}}"),
                    (f"sum by (instance) (rate(llmserve_generation_tokens_total{{{WORKER}}}"
                     f"[{RATE}]))", "generated {{instance}}")], width=8),
        timeseries("Tokens per request", "Median prompt and generated tokens of finished "
                   "requests.", "short",
                   [(f"histogram_quantile(0.5, {per_worker('llmserve_request_prompt_tokens')})",
                     "prompt {{instance}}"),
                    (f"histogram_quantile(0.5, "
                     f"{per_worker('llmserve_request_generation_tokens')})",
                     "generated {{instance}}")], width=8),
        timeseries("KV cache usage", "Share of KV cache blocks held by requests.", "percentunit",
                   by_worker(f"max by (instance) (llmserve_kv_cache_usage_ratio{{{WORKER}}})"),
                   width=8),
        timeseries("Prefix-cache hit rate", "Prompt tokens served from the prefix cache, of "
                   "those looked up.", "percentunit",
                   by_worker(f"sum by (instance) (rate(llmserve_prefix_cache_hits_total{{{WORKER}}}"
                             f"[{RATE}])) / (sum by (instance) (rate("
                             f"llmserve_prefix_cache_queries_total{{{WORKER}}}[{RATE}])) > 0)"),
                   width=8),
        timeseries("Preemptions/s", "Requests preempted (KV cache dropped, recomputed later).",
                   "short",
                   by_worker(f"sum by (instance) (rate(llmserve_num_preemptions_total{{{WORKER}}}"
                             f"[{RATE}]))"), width=8),
    ]
    return dashboard("llmserve-worker", "llmserve / Workers",
                     "Engine steps, queues, tokens and KV cache of each worker.",
                     [variable_datasource(),
                      variable_query("model", "Model",
                                     "label_values(llmserve_num_requests_running, model)"),
                      variable_query("worker", "Worker",
                                     'label_values(llmserve_num_requests_running{model=~"$model"}'
                                     ', instance)')],
                     panels)


def gateway():
    def gateway_quantiles(metric):
        return [(f"histogram_quantile({q}, sum by (api, le) (rate({metric}_bucket[{RATE}])))",
                 f"p{int(q * 100)} {{{{api}}}}") for q in (0.5, 0.99)]

    panels = [
        row("Requests"),
        timeseries("Requests/s by API and status", "Requests that ended, by API (grpc, http) and "
                   "gRPC status code name.", "reqps",
                   [(f"sum by (api, code) (rate(llmserve_gateway_requests_total{{{MODEL}}}"
                     f"[{RATE}]))", "{{api}} {{code}}")], stack=True),
        timeseries("Active streams", "Requests in flight through each gateway.", "short",
                   [("sum by (instance) (llmserve_gateway_active_streams)", "{{instance}}")]),
        timeseries("Time to first token (gateway)", "Arrival at the gateway to the first token "
                   "reaching it, by API (includes admission and routing).", "s",
                   gateway_quantiles("llmserve_gateway_time_to_first_token_seconds"), width=8),
        timeseries("Inter-token latency (gateway)", "Gap between tokens as the gateway relays "
                   "them.", "s",
                   gateway_quantiles("llmserve_gateway_inter_token_latency_seconds"), width=8),
        timeseries("Request duration (gateway)", "Arrival at the gateway to the end of the "
                   "response.", "s",
                   gateway_quantiles("llmserve_gateway_request_duration_seconds"), width=8),
        row("Routing and workers"),
        timeseries("Routing decisions/s by reason", "Which rule picked the worker: prefix_hit "
                   "(a worker caches the prompt's prefix), prefix_miss, prefix_overloaded (the "
                   "caching worker was too busy), least_load, round_robin.", "short",
                   [(f"sum by (reason) (rate(llmserve_gateway_routing_decisions_total[{RATE}]))",
                     "{{reason}}")], width=8, stack=True),
        timeseries("Workers up", "1 when the gateway can route to the worker, 0 when it is down "
                   "or draining (the best view among gateways).", "short",
                   [(f"max by (worker, model) (llmserve_gateway_worker_up{{{MODEL}}})",
                     "{{worker}} {{model}}")], width=8),
        timeseries("Ready workers per model", "Workers the gateways can route to, per model.",
                   "short",
                   [(f"max by (model) (llmserve_gateway_model_ready_workers{{{MODEL}}})",
                     "{{model}}")], width=8),
        row("Refusals and lifecycle"),
        timeseries("Refused on limits/s", "Requests refused by a rate or concurrency limit "
                   "(429 / RESOURCE_EXHAUSTED).", "reqps",
                   [(f"sum by (instance) (rate(llmserve_gateway_rate_limited_total[{RATE}]))",
                     "{{instance}}")], width=8),
        timeseries("Auth failures/s", "Requests refused because their API key or JWT was not "
                   "accepted (401).", "reqps",
                   [(f"sum by (instance) (rate(llmserve_gateway_auth_failures_total[{RATE}]))",
                     "{{instance}}")], width=8),
        timeseries("Draining", "1 while a gateway drains after SIGTERM.", "short",
                   [("max by (instance) (llmserve_gateway_draining)", "{{instance}}")], width=8),
    ]
    return dashboard("llmserve-gateway", "llmserve / Gateway",
                     "Requests, routing, workers and refusals as the gateways see them.",
                     [variable_datasource(),
                      variable_query("model", "Model",
                                     "label_values(llmserve_gateway_model_ready_workers, model)")],
                     panels)


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(
        os.path.abspath(__file__)), "dashboards")
    for name, build in (("overview", overview), ("worker", worker), ("gateway", gateway)):
        with open(os.path.join(out, f"llmserve-{name}.json"), "w") as f:
            json.dump(build(), f, indent=2, sort_keys=True)
            f.write("\n")


if __name__ == "__main__":
    main()
