#!/usr/bin/env python3
"""Writes check.sh's report.json and report.md from its work folder.

  report.py WORK OUT ELAPSED_S BUDGET_S
"""

import glob
import json
import os
import sys

# Peak HBM bandwidth by product name, from NVIDIA's data sheets (bytes/s).
PEAK_BANDWIDTH = [("H200", 4.8e12), ("H100 80GB HBM3", 3.35e12), ("H100 PCIe", 2.0e12),
                  ("H100", 3.35e12), ("A100-SXM4-80GB", 2.04e12), ("A100", 1.555e12)]


def read(path):
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except OSError:
        return ""


def gtest_summary(path):
    try:
        with open(path) as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    summary = {"passed": 0, "failed": 0, "skipped": 0, "failures": [], "skip_reasons": []}
    for suite in data.get("testsuites", []):
        for case in suite.get("testsuite", []):
            name = f'{suite["name"]}.{case["name"]}'
            if case.get("failures"):
                summary["failed"] += 1
                message = case["failures"][0].get("failure", "")
                summary["failures"].append({"test": name, "message": message[:1500]})
            elif case.get("result") == "SKIPPED":
                summary["skipped"] += 1
                if len(summary["skip_reasons"]) < 3:
                    summary["skip_reasons"].append(name)
            else:
                summary["passed"] += 1
    return summary


def json_object_in(text):
    """The indented JSON object hf_parity.py prints, after whatever was logged before it."""
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line == "{":
            try:
                return json.loads("\n".join(lines[i:]))
            except ValueError:
                return None
    return None


def main():
    work, out, elapsed, budget = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    logs = os.path.join(work, "logs")
    stages = [json.loads(line) for line in read(os.path.join(work, "stages.jsonl")).splitlines()
              if line.strip()]
    environment = read(os.path.join(logs, "environment.log"))
    gpu = next((s["note"] for s in stages if s["stage"] == "gpu" and s["rc"] == 0), None)
    peak = next((bw for key, bw in PEAK_BANDWIDTH if gpu and key in gpu), None)
    report = {"elapsed_s": elapsed, "budget_s": budget, "gpu": gpu,
              "environment": environment.splitlines(), "stages": stages, "tests": {},
              "parity": {}, "bench": [], "e2e": read(os.path.join(logs, "e2e-worker-cuda.log"))}
    for path in sorted(glob.glob(os.path.join(logs, "*_test.json"))):
        summary = gtest_summary(path)
        if summary:
            report["tests"][os.path.basename(path)[:-5]] = summary
    for path in sorted(glob.glob(os.path.join(logs, "parity-*.log"))):
        name = os.path.basename(path)[len("parity-"):-4]
        text = read(path)
        report["parity"][name] = json_object_in(text) or {"error": text[-2000:]}
    for path in sorted(glob.glob(os.path.join(logs, "bench-*.log"))):
        for line in read(path).splitlines():
            if not line.startswith('{"batch"'):
                continue
            row = json.loads(line)
            # The Forward calls alone when the benchmark says (not its host argmax per row).
            step_s = row.get("decode_forward_s", row["decode_s"]) / row["gen_len"]
            row["decode_forward_tok_s"] = round(row["batch"] * row["gen_len"] /
                                                row.get("decode_forward_s", row["decode_s"]), 1)
            step_bytes = row.get("step_read_bytes", row["weight_bytes"])
            row["decode_weight_bandwidth_gb_s"] = round(step_bytes / step_s / 1e9, 1)
            if peak:
                row["hbm_fraction"] = round(step_bytes / step_s / peak, 3)
            row["run"] = os.path.basename(path)[len("bench-"):-4]
            report["bench"].append(row)
    for name, text in (("sanitizers", "sanitizer-"),):
        report[name] = {}
        for path in sorted(glob.glob(os.path.join(logs, text + "*.log"))):
            lines = read(path).splitlines()
            summary = [line for line in lines if "ERROR SUMMARY" in line or "RACECHECK SUMMARY"
                       in line or "Invalid" in line or "Race reported" in line][:20]
            report[name][os.path.basename(path)[len(text):-4]] = summary or lines[-5:]
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=1)

    md = [f"# GPU check: {gpu or 'no GPU'}", "",
          f"{elapsed} s of a {budget} s budget.", "", "```", environment.strip(), "```", "",
          "| stage | rc | s | note |", "|---|---:|---:|---|"]
    md += [f'| {s["stage"]} | {s["rc"]} | {s["seconds"]} | {s["note"]} |' for s in stages]
    if report["tests"]:
        md += ["", "| test binary | passed | failed | skipped |", "|---|---:|---:|---:|"]
        for name, t in report["tests"].items():
            md.append(f'| {name} | {t["passed"]} | {t["failed"]} | {t["skipped"]} |')
        for name, t in report["tests"].items():
            for failure in t["failures"][:8]:
                md += ["", f'FAILED {failure["test"]}:', "```", failure["message"][:800], "```"]
    if report["parity"]:
        md += ["", "| model | run | max NMSE | mean NMSE | limit | greedy agreed/compared | ok |",
               "|---|---|---:|---:|---:|---:|---|"]
        for model, p in report["parity"].items():
            if "runs" not in p:
                md.append(f"| {model} | error: see report.json | | | | | |")
                continue
            for r in p["runs"]:
                md.append(f'| {model} | {r["name"]} | {r.get("max_nmse", "-"):.3g} | '
                          f'{r.get("mean_nmse", 0):.3g} | {r["nmse_limit"]} | '
                          f'{r.get("greedy_agreed")}/{r.get("greedy_compared")} | {r["ok"]} |'
                          if "max_nmse" in r else f'| {model} | {r["name"]} | {r.get("error")} |')
    if report["bench"]:
        md += ["", "decode tok/s counts the benchmark's host argmax; forward tok/s and the bandwidth "
               "the Forward calls alone.", "",
               "| run | batch | prefill tok/s | decode tok/s | forward tok/s | read per step GB | "
               "weight GB/s | HBM |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in report["bench"]:
            md.append(f'| {r["run"]} | {r["batch"]} | {r["prefill_tok_s"]:.0f} | '
                      f'{r["decode_tok_s"]:.0f} | {r["decode_forward_tok_s"]:.0f} | '
                      f'{r.get("step_read_bytes", r["weight_bytes"]) / 1e9:.2f} | '
                      f'{r["decode_weight_bandwidth_gb_s"]} | {r.get("hbm_fraction", "-")} |')
    if report["sanitizers"]:
        md += ["", "compute-sanitizer:", "```"]
        for name, lines in report["sanitizers"].items():
            md += [f"{name}:"] + [f"  {line}" for line in lines]
        md.append("```")
    if report["e2e"]:
        md += ["", "end to end:", "```", report["e2e"].strip()[-1500:], "```"]
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write("\n".join(md) + "\n")


if __name__ == "__main__":
    main()
