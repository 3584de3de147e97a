#!/usr/bin/env bash
# The dashboard and the scrape configuration, checked without a Grafana:
#  - promtool accepts the scrape configuration;
#  - the dashboard's datasource is a `datasource` template variable (no ${DS_...} import
#    placeholders) and every panel uses it;
#  - every metric a panel queries is one Headroom exports: in the metrics of a real
#    `headroom profile --metrics` run (histogram series included), or, for the daemon's
#    device and job gauges that a CPU profile does not set, documented in profiler/metrics.h
#    (whose own test renders them);
#  - every panel expression is valid PromQL (promtool checks them as recording rules, with
#    Grafana's variables filled in).
set -euo pipefail

HEADROOM="$TEST_SRCDIR/headroom/clients/headroom"
DASHBOARD="$TEST_SRCDIR/headroom/dashboards/headroom.json"
METRICS_HEADER="$TEST_SRCDIR/headroom/profiler/metrics.h"
SCRAPE="$TEST_SRCDIR/headroom/dashboards/prometheus.yml"
PROMTOOL=/usr/bin/promtool
if [[ ! -x "$PROMTOOL" ]]; then
  echo "FAIL: $PROMTOOL is missing; install Debian's prometheus package (./headroom test does)" >&2
  exit 1
fi

"$PROMTOOL" check config "$SCRAPE"

"$HEADROOM" profile --model mlp --batch 4 --depth 2 --width 8 --steps 2 \
  --metrics "$TEST_TMPDIR/metrics.txt" --json >/dev/null

/usr/bin/python3 - "$DASHBOARD" "$TEST_TMPDIR/metrics.txt" "$TEST_TMPDIR/rules.yml" \
  "$METRICS_HEADER" <<'PY'
import json
import re
import sys

dashboard_path, metrics_path, rules_path, header_path = sys.argv[1:]
text = open(dashboard_path).read()
failures = []
if "${DS_" in text:
    failures.append("the dashboard uses a ${DS_...} import placeholder")
dash = json.loads(text)
variables = {v["name"]: v for v in dash["templating"]["list"]}
if variables.get("datasource", {}).get("type") != "datasource":
    failures.append("no `datasource` template variable of type datasource")

# Metric names Headroom exports, histogram series included.
exported = set()
documented = set(re.findall(r"^//\s+(headroom_\w+)[{ ]", open(header_path).read(), re.M))
if not {"headroom_device_memory_used_bytes", "headroom_jobs"} <= documented:
    failures.append(f"cannot read the metric names documented in {header_path}")
exported |= {n for n in documented if not n.endswith("_seconds")}
for line in open(metrics_path):
    m = re.match(r"# TYPE (\S+) (\S+)", line)
    if m:
        exported.add(m.group(1))
        if m.group(2) == "histogram":
            exported.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))

exprs = []
for panel in dash["panels"]:
    if panel.get("datasource", {}).get("uid") != "${datasource}":
        failures.append(f"panel '{panel['title']}' does not use the datasource variable")
    if not panel.get("targets"):
        failures.append(f"panel '{panel['title']}' has no query")
    for target in panel.get("targets", []):
        exprs.append((panel["title"], target["expr"]))
for var in ("device", "job"):
    exprs.append((f"variable {var}", ""))  # label_values() is Grafana's, not PromQL.
    query = variables[var]["definition"]
    for name in re.findall(r"\b(headroom_\w+)", query):
        if name not in exported:
            failures.append(f"variable {var} queries {name}, which Headroom does not export")

rules = ["groups:", "  - name: dashboard", "    rules:"]
n = 0
for title, expr in exprs:
    if not expr:
        continue
    for name in re.findall(r"\b(headroom_\w+)", expr):
        if name not in exported:
            failures.append(f"panel '{title}' queries {name}, which Headroom does not export")
    filled = (expr.replace("$__rate_interval", "1m")
                  .replace("$device", ".*").replace("$job", ".*"))
    n += 1
    rules.append(f"      - record: headroom:dashboard_expr_{n}")
    rules.append("        expr: " + json.dumps(filled))
open(rules_path, "w").write("\n".join(rules) + "\n")
print(f"{len(dash['panels'])} panels, {n} expressions, {len(exported)} exported series names")
if failures:
    print("FAIL:\n  " + "\n  ".join(failures))
    sys.exit(1)
PY

"$PROMTOOL" check rules "$TEST_TMPDIR/rules.yml"
echo PASS
