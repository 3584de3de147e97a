#!/usr/bin/env bash
# The dashboard against live data: a real headroomd, scraped every second by Debian's
# Prometheus through a configuration made from dashboards/prometheus.yml, runs a training job
# whose plan offloads and recomputes (and a cancelled one); then every panel query of
# dashboards/headroom.json, with Grafana's variables filled in as Grafana would for the one
# device and the one job, must return data from Prometheus' HTTP API.
#
#  - promtool accepts the shipped scrape configuration and the generated one;
#  - the dashboard's `device` and `job` variable queries (label_values) list the daemon's
#    device and the job;
#  - every panel target returns status success and at least one series (each is printed
#    with its series and values), with the `job` variable set to both jobs that ran: the
#    offloading one and a dataset job (3 epochs of a toy image set, evaluated each), whose
#    epoch, validation and input-wait panels have data only from it; the test fails listing
#    every panel that returned none;
#  - the job's offloaded bytes counter is above zero, and Prometheus saw its step count
#    change over several scrapes;
#  - headroomd exits 0 on SIGTERM.
#
# headroomd runs with OMP_NUM_THREADS=1: oneDNN's OpenMP threads spin-wait, and on a busy
# two-core machine that makes steps 30 times slower; one thread keeps the job's length
# predictable (about 15 s).
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
HEADROOMD="$RUNFILES/server/headroomd"
HEADROOM="$RUNFILES/clients/headroom"
DASHBOARD="$RUNFILES/dashboards/headroom.json"
SCRAPE="$RUNFILES/dashboards/prometheus.yml"
PROMETHEUS=/usr/bin/prometheus
PROMTOOL=/usr/bin/promtool
PYTHON=/usr/bin/python3
TMP="${TEST_TMPDIR:?}"

# The job: an MLP whose plan under 7 MiB (its unconstrained peak is 8.1 MiB, its kernels'
# scratch included) splits the step into sections, recomputes some and offloads their inputs
# to the host (host memory taken as separate, as on a GPU: on the CPU backend it is the
# device's own, and offloading would free nothing).
MODEL=(--model mlp --batch 512 --depth 8 --width 256 --input 64)
BUDGET=7MiB
STEPS=600

for tool in "$PROMETHEUS" "$PROMTOOL"; do
  if [[ ! -x "$tool" ]]; then
    echo "FAIL: $tool is missing; install Debian's prometheus package (./headroom test does)" >&2
    exit 1
  fi
done

DAEMON_PID=""
PROM_PID=""
cleanup() {
  local pid
  for pid in "$PROM_PID" "$DAEMON_PID"; do
    if [[ -n "$pid" ]] && kill -0 "$pid" 2>/dev/null; then
      kill -TERM "$pid" 2>/dev/null || true
      sleep 1
      kill -KILL "$pid" 2>/dev/null || true
    fi
  done
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  for log in "$TMP/headroomd.log" "$TMP/prometheus.log"; do
    if [[ -s "$log" ]]; then
      echo "--- last lines of $log" >&2
      tail -n 20 "$log" >&2
    fi
  done
  exit 1
}

# Prints a TCP port on 127.0.0.1 that is free now.
free_port() {
  "$PYTHON" -c 'import socket
s = socket.socket()
s.bind(("127.0.0.1", 0))
print(s.getsockname()[1])
s.close()'
}

# Prints `expr`'s instant-query answer (JSON) from Prometheus.
prom_query() {
  curl -sS --fail --get --data-urlencode "query=$1" "http://$PROM_ADDR/api/v1/query"
}

# Prints the first value of the instant query `expr`, or "none".
prom_value() {
  prom_query "$1" | "$PYTHON" -c 'import json, sys
r = json.load(sys.stdin)["data"]["result"]
print(r[0]["value"][1] if r else "none")'
}

start=$SECONDS

# ---- 1. headroomd on free loopback ports, with a toy dataset under its data root -----------
mkdir -p "$TMP/state" "$TMP/data/toy"
# 160 one-channel 8x8 images of 4 classes (class c lights up row c), as IDX files.
"$PYTHON" - "$TMP/data/toy" <<'PY'
import random
import struct
import sys

out = sys.argv[1]
rng = random.Random(7)
labels = [(i * 7 + 3) % 4 for i in range(160)]
pixels = bytearray()
for label in labels:
    pixels += bytes(rng.randrange(150) + (100 if p // 8 == label else 0) for p in range(64))
open(f"{out}/images.idx", "wb").write(struct.pack(">BBBBIII", 0, 0, 8, 3, 160, 8, 8) + pixels)
open(f"{out}/labels.idx", "wb").write(struct.pack(">BBBBI", 0, 0, 8, 1, 160) + bytes(labels))
open(f"{out}/index.txt", "w").write("headroom-dataset 1\nclasses 4\nshard images.idx labels.idx\n")
PY
OMP_NUM_THREADS=1 "$HEADROOMD" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --state "$TMP/state" \
  --device-memory 64MiB --data-root "$TMP/data" --ready-file "$TMP/ready" \
  >"$TMP/headroomd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 600); do
  [[ -s "$TMP/ready" ]] && grep -q '^metrics=' "$TMP/ready" && break
  kill -0 "$DAEMON_PID" 2>/dev/null || fail "headroomd exited before it was ready"
  sleep 0.1
done
[[ -s "$TMP/ready" ]] || fail "headroomd wrote no ready file in 60 s"
GRPC_ADDR=$(sed -n 's/^grpc=//p' "$TMP/ready")
METRICS_ADDR=$(sed -n 's/^metrics=//p' "$TMP/ready")
[[ "$GRPC_ADDR" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "bad grpc address '$GRPC_ADDR'"
[[ "$METRICS_ADDR" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "bad metrics address '$METRICS_ADDR'"
curl -sS --fail "http://$METRICS_ADDR/metrics" | grep -q '^headroom_jobs{' ||
  fail "http://$METRICS_ADDR/metrics has no headroom_jobs"
echo "headroomd: grpc $GRPC_ADDR, metrics $METRICS_ADDR"

# ---- 2. The scrape configuration, pointed at it --------------------------------------------
"$PROMTOOL" check config "$SCRAPE"
"$PYTHON" - "$SCRAPE" "$TMP/prometheus.yml" "$METRICS_ADDR" <<'PY'
import re
import sys

source, dest, target = sys.argv[1:]
text = open(source).read()
text, targets = re.subn(r'"127\.0\.0\.1:9464"', f'"{target}"', text)
text, intervals = re.subn(r"(?m)^(\s*)(scrape_interval|evaluation_interval):.*$",
                          r"\1\2: 1s", text)
if targets != 1 or intervals != 2:
    sys.exit(f"{source}: expected one 127.0.0.1:9464 target and two intervals, "
             f"found {targets} and {intervals}")
open(dest, "w").write(text)
PY
"$PROMTOOL" check config "$TMP/prometheus.yml"

# ---- 3. Prometheus ---------------------------------------------------------------------------
PROM_ADDR="127.0.0.1:$(free_port)"
"$PROMETHEUS" --config.file="$TMP/prometheus.yml" --storage.tsdb.path="$TMP/tsdb" \
  --web.listen-address="$PROM_ADDR" >"$TMP/prometheus.log" 2>&1 &
PROM_PID=$!
for _ in $(seq 600); do
  curl -s --fail "http://$PROM_ADDR/-/ready" >/dev/null 2>&1 && break
  kill -0 "$PROM_PID" 2>/dev/null || fail "prometheus exited before it was ready"
  sleep 0.1
done
curl -s --fail "http://$PROM_ADDR/-/ready" >/dev/null || fail "prometheus not ready in 60 s"
echo "prometheus: $PROM_ADDR ready after $((SECONDS - start)) s"
# Wait for the first scrape of headroomd.
for _ in $(seq 300); do
  [[ "$(prom_value 'up{job="headroomd"}')" == 1 ]] && break
  sleep 0.1
done
[[ "$(prom_value 'up{job="headroomd"}')" == 1 ]] || fail "prometheus has not scraped headroomd"

# ---- 4. The jobs -----------------------------------------------------------------------------
# A dataset job first (48 steps, a few seconds): the fit panels' series.
"$HEADROOM" submit --server "$GRPC_ADDR" --model small_cnn --image_size 8 --channels 1 \
  --classes 4 --batch 8 --dataset "$TMP/data/toy" --epochs 3 --eval-every 1 \
  --validation-fraction 0.2 --name dashboards-fit --json >"$TMP/submit_fit.json" ||
  fail "headroom submit --dataset failed"
FIT_JOB=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["job_id"])' \
  "$TMP/submit_fit.json")
"$HEADROOM" submit --server "$GRPC_ADDR" "${MODEL[@]}" --budget "$BUDGET" --host-memory separate --steps "$STEPS" \
  --checkpoint-every 100 --name dashboards --json >"$TMP/submit.json" ||
  fail "headroom submit failed"
read -r JOB OFFLOADED RECOMPUTE SECTIONS < <("$PYTHON" -c 'import json, sys
r = json.load(open(sys.argv[1]))
s = r["plan"]["summary"]
print(r["job_id"], s.get("offloaded_bytes", 0), s.get("recompute_flops", 0), len(r["plan"]["sections"]))' \
  "$TMP/submit.json")
echo "job $JOB: $SECTIONS sections, $OFFLOADED B offloaded, $RECOMPUTE recomputed FLOPs per step"
((OFFLOADED > 0)) || fail "the plan of $JOB offloads nothing; pick a smaller budget"
((RECOMPUTE > 0)) || fail "the plan of $JOB recomputes nothing; pick a smaller budget"

# A second job, queued behind the first (one runs at a time), cancelled.
"$HEADROOM" submit --server "$GRPC_ADDR" "${MODEL[@]}" --budget "$BUDGET" --host-memory separate --steps 100000 \
  --name to-cancel --json >"$TMP/submit2.json" || fail "the second headroom submit failed"
CANCELLED_JOB=$("$PYTHON" -c 'import json, sys; print(json.load(open(sys.argv[1]))["job_id"])' \
  "$TMP/submit2.json")
"$HEADROOM" cancel --server "$GRPC_ADDR" "$CANCELLED_JOB" || fail "cannot cancel $CANCELLED_JOB"

job_start=$SECONDS
set +e
"$HEADROOM" watch --server "$GRPC_ADDR" "$JOB" >"$TMP/watch.txt" 2>&1
watch_rc=$?
set -e
tail -n 2 "$TMP/watch.txt"
((watch_rc == 0)) || fail "headroom watch $JOB exited $watch_rc (0 is succeeded)"
echo "job $JOB ran $STEPS steps in $((SECONDS - job_start)) s"
"$HEADROOM" watch --server "$GRPC_ADDR" "$FIT_JOB" >"$TMP/watch_fit.txt" 2>&1 ||
  fail "headroom watch $FIT_JOB (the dataset job) did not end succeeded: $(tail -n 2 "$TMP/watch_fit.txt")"
"$HEADROOM" jobs --server "$GRPC_ADDR"

# Let Prometheus scrape the ended jobs.
for _ in $(seq 100); do
  [[ "$(prom_value 'headroom_jobs{state="succeeded"}')" == 2 &&
     "$(prom_value 'headroom_jobs{state="cancelled"}')" == 1 &&
     "$(prom_value "headroom_step_duration_seconds_count{job=\"$JOB\"}")" == "$STEPS" ]] && break
  sleep 0.2
done
sleep 1.5
[[ "$(prom_value 'headroom_jobs{state="succeeded"}')" == 2 ]] ||
  fail "Prometheus does not see two succeeded jobs"
[[ "$(prom_value 'headroom_jobs{state="cancelled"}')" == 1 ]] ||
  fail "Prometheus does not see one cancelled job"
[[ "$(prom_value "headroom_job_epoch{job=\"$FIT_JOB\"}")" == 3 ]] ||
  fail "Prometheus does not see epoch 3 of the dataset job $FIT_JOB"
[[ "$(prom_value "headroom_step_duration_seconds_count{job=\"$JOB\"}")" == "$STEPS" ]] ||
  fail "Prometheus does not see $STEPS steps of $JOB"
offloaded_total=$(prom_value "headroom_offloaded_bytes_total{job=\"$JOB\"}")
"$PYTHON" -c 'import sys; sys.exit(not float(sys.argv[1]) > 0)' "$offloaded_total" ||
  fail "headroom_offloaded_bytes_total of $JOB is $offloaded_total"
scrapes=$(prom_value "changes(headroom_step_duration_seconds_count{job=\"$JOB\"}[10m])")
echo "Prometheus saw the step count of $JOB change $scrapes times; $offloaded_total B offloaded"
"$PYTHON" -c 'import sys; sys.exit(not float(sys.argv[1]) >= 4)' "$scrapes" ||
  fail "the job ran over too few scrapes ($scrapes changes of its step count)"

# ---- 5. Every panel, as Grafana would query it -----------------------------------------------
"$PYTHON" - "$DASHBOARD" "$PROM_ADDR" "$JOB" "$FIT_JOB" <<'PY'
import json
import re
import sys
import urllib.parse
import urllib.request

dashboard_path, prom, job, fit_job = sys.argv[1:]
dash = json.load(open(dashboard_path))


def api(path, **params):
    url = f"http://{prom}/api/v1/{path}?" + urllib.parse.urlencode(params, doseq=True)
    with urllib.request.urlopen(url, timeout=30) as r:
        return json.load(r)


def regex_escape(value):
    """Grafana's prometheusSpecialRegexEscape, for a value of a multi-value variable."""
    return re.sub(r"[$^*{}\[\]'+?.()|]", lambda m: "\\\\" + m.group(0),
                  value.replace("\\", "\\\\\\\\"))


# The variables: run their label_values() queries as Grafana does (series matching the
# selector, the label's values), then pick the daemon's device and our job.
values = {}
chosen = {}
for var in dash["templating"]["list"]:
    if var.get("type") != "query":
        continue
    m = re.fullmatch(r"label_values\((.+),\s*(\w+)\)", var["definition"].strip())
    if not m:
        sys.exit(f"FAIL: variable {var['name']}: cannot read {var['definition']!r}")
    selector, label = m.groups()
    for name, value in chosen.items():
        selector = selector.replace("$" + name, regex_escape(value))
    found = sorted(api(f"label/{label}/values", **{"match[]": selector})["data"])
    values[var["name"]] = found
    print(f"variable {var['name']}: label_values({selector}, {label}) = {found}")
    if var["name"] == "job":
        for j in (job, fit_job):
            if j not in found:
                sys.exit(f"FAIL: variable job does not list {j}")
        chosen["job"] = [job, fit_job]
    else:
        if len(found) != 1:
            sys.exit(f"FAIL: variable {var['name']}: expected one value, got {found}")
        chosen[var["name"]] = found[0]
if set(chosen) != {"device", "job"}:
    sys.exit(f"FAIL: expected variables device and job, found {sorted(chosen)}")

BUILTINS = {"__rate_interval": "1m", "__interval": "5s", "__range": "10m"}


def fill(expr):
    """Returns `expr` with Grafana's variables filled in for one selected value each."""
    def var(m):
        name = m.group("braced") or m.group("plain") or m.group("bracket")
        fmt = m.group("fmt")
        if name in BUILTINS:
            return BUILTINS[name]
        if name not in chosen:
            raise KeyError(name)
        value = chosen[name]
        # Multi-value variables are regex-escaped (in =~ matchers), several as (a|b);
        # `raw` is verbatim.
        if isinstance(value, list):
            return "(" + "|".join(v if fmt == "raw" else regex_escape(v) for v in value) + ")"
        return value if fmt == "raw" else regex_escape(value)
    pattern = (r"\$\{(?P<braced>\w+)(?::(?P<fmt>\w+))?\}|\[\[(?P<bracket>\w+)\]\]"
               r"|\$(?P<plain>\w+)")
    return re.sub(pattern, var, expr)


failures = []
rows = []
for panel in dash["panels"]:
    for target in panel.get("targets", []):
        expr = target["expr"]
        try:
            filled = fill(expr)
        except KeyError as e:
            failures.append(f"{panel['title']}: unknown variable {e} in {expr}")
            continue
        answer = api("query", query=filled)
        result = answer.get("data", {}).get("result", [])
        shown = ", ".join(
            "{" + ",".join(f"{k}={v}" for k, v in sorted(s["metric"].items())) + "} " +
            s["value"][1] for s in result[:6])
        print(f"[{panel['title']}] {filled}\n    -> {answer['status']}, {len(result)} series: {shown}")
        rows.append((panel["title"], filled, len(result)))
        if answer["status"] != "success" or not result:
            failures.append(f"{panel['title']}: {filled} -> {answer['status']}, "
                            f"{len(result)} series")
print(f"{len(rows)} panel queries of {len(dash['panels'])} panels")
if failures:
    print("FAIL: panels without data:\n  " + "\n  ".join(failures))
    sys.exit(1)
PY

# ---- 6. Stop both ----------------------------------------------------------------------------
kill -TERM "$PROM_PID"
wait "$PROM_PID" || echo "prometheus exited $?"
PROM_PID=""
kill -TERM "$DAEMON_PID"
set +e
wait "$DAEMON_PID"
daemon_rc=$?
set -e
DAEMON_PID=""
((daemon_rc == 0)) || fail "headroomd exited $daemon_rc on SIGTERM"
grep -q "headroomd: stopped" "$TMP/headroomd.log" || fail "headroomd did not say it stopped"
echo "PASS: every panel has data ($((SECONDS - start)) s)"
