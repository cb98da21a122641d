#!/usr/bin/env bash
# The shipped monitoring, checked without a server: promtool (Debian's prometheus package) checks
# every rule file and runs the rule unit tests in deploy/prometheus/tests; the Grafana dashboards
# must be what deploy/grafana/generate_dashboards.py writes, with unique uids and every query on
# the ${datasource} variable. (tests/e2e/monitoring_test.py runs every query and rule against a
# real Prometheus scraping the real binaries.)
# Usage: monitoring_rules_test.sh SOURCE_DIR WORK_DIR
# Exit 77 (skipped) when promtool is missing.
set -euo pipefail

src="$1"
work="$2"
if ! command -v promtool >/dev/null; then
  echo "SKIP: promtool is not installed (Debian package prometheus)" >&2
  exit 77
fi
rm -rf "$work"
mkdir -p "$work"

echo "== promtool check rules"
promtool check rules "$src"/deploy/prometheus/rules/*.yml

echo "== promtool test rules"
# Relative rule_files resolve from each test file's folder.
(cd "$src/deploy/prometheus/tests" && promtool test rules ./*.yml)

# Every alert has a unit test that names it, and every rule file is under test.
for alert in $(sed -n 's/^ *- alert: *//p' "$src"/deploy/prometheus/rules/*.yml); do
  if ! grep -q "alertname: *$alert\$" "$src"/deploy/prometheus/tests/*.yml; then
    echo "FAIL: alert $alert has no promtool test in deploy/prometheus/tests" >&2
    exit 1
  fi
done
for rules in "$src"/deploy/prometheus/rules/*.yml; do
  if ! grep -q "\.\./rules/$(basename "$rules")\$" "$src"/deploy/prometheus/tests/*.yml; then
    echo "FAIL: $(basename "$rules") is loaded by no promtool test" >&2
    exit 1
  fi
done

echo "== promtool check config (Compose)"
promtool check config --syntax-only "$src/deploy/prometheus/prometheus-compose.yml"

echo "== dashboards are generated"
python3 "$src/deploy/grafana/generate_dashboards.py" "$work"
for generated in "$work"/*.json; do
  shipped="$src/deploy/grafana/dashboards/$(basename "$generated")"
  if ! cmp -s "$generated" "$shipped"; then
    echo "FAIL: $shipped differs from what deploy/grafana/generate_dashboards.py writes;" \
      "edit the script and run it" >&2
    diff -u "$shipped" "$generated" | head -20 >&2 || true
    exit 1
  fi
done
python3 - "$src/deploy/grafana/dashboards" "$src" <<'EOF'
import glob, json, os, sys
uids = {}
for path in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    with open(path) as f:
        dashboard = json.load(f)
    name = os.path.basename(path)
    if dashboard["uid"] in uids:
        sys.exit(f"FAIL: {name} and {uids[dashboard['uid']]} share uid {dashboard['uid']}")
    uids[dashboard["uid"]] = name
    variables = {v["name"] for v in dashboard["templating"]["list"]}
    if "datasource" not in variables or "model" not in variables:
        sys.exit(f"FAIL: {name}: no $datasource or $model variable")
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            if target["datasource"]["uid"] != "${datasource}":
                sys.exit(f"FAIL: {name} / {panel['title']}: a query not on ${{datasource}}")
            for variable in ("$model", "$worker"):
                if variable in target["expr"] and variable[1:] not in variables:
                    sys.exit(f"FAIL: {name} / {panel['title']}: {variable} is not defined")
    # docs/operations.md describes every panel (its table lists the panel titles).
    with open(os.path.join(sys.argv[2], "docs/operations.md")) as f:
        operations = f.read()
    for panel in dashboard["panels"]:
        if f"| {panel['title']} |" not in operations and f"| **{panel['title']}** |" not in operations:
            sys.exit(f"FAIL: {name} / {panel['title']}: not described in docs/operations.md")
print(f"{len(uids)} dashboards: {', '.join(sorted(uids))}")
EOF
echo "all monitoring checks passed"
