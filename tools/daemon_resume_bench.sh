#!/usr/bin/env bash
# Issue 23's third target on the daemon: a Fashion-MNIST job (small_cnn, batch 64) submitted
# to headroomd twice with the same options; the second time headroomd is SIGKILLed in the
# middle of an epoch and started again. Prints both jobs' final eval accuracy and loss (on
# the 10,000 test images), the step it resumed from, and whether they are bitwise equal.
#
#   bazel build //server:headroomd //clients:headroom
#   tools/daemon_resume_bench.sh [--epochs N] [--kill-at STEP] [--out DIR] [--bin DIR]
#
# --bin: where headroomd and headroom are (default bazel-bin's).
#
# Exits 1 when the two evaluations differ in any bit.
set -euo pipefail

EPOCHS=1
KILL_AT=500
TMP=$(mktemp -d /tmp/daemon_resume_bench.XXXXXX)
BIN=""
while (($#)); do
  case "$1" in
    --epochs) EPOCHS="$2"; shift 2 ;;
    --kill-at) KILL_AT="$2"; shift 2 ;;
    --out) TMP="$2"; mkdir -p "$TMP"; shift 2 ;;
    --bin) BIN="$2"; shift 2 ;;
    *) echo "usage: $0 [--epochs N] [--kill-at STEP] [--out DIR] [--bin DIR]" >&2; exit 2 ;;
  esac
done
ROOT=$(cd "$(dirname "$0")/.." && pwd)
HEADROOM="${BIN:-$ROOT/bazel-bin/clients}/headroom"
HEADROOMD="${BIN:-$ROOT/bazel-bin/server}/headroomd"
PYTHON=/usr/bin/python3
[[ -x "$HEADROOMD" && -x "$HEADROOM" ]] ||
  { echo "build first: bazel build //server:headroomd //clients:headroom" >&2; exit 2; }
# shellcheck source=tests/headroomd_test_lib.sh
source "$ROOT/tests/headroomd_test_lib.sh"

JOB=(--dataset fashion-mnist --model small_cnn --batch 64 --epochs "$EPOCHS" --eval-every 1
     --lr 0.05 --lr-schedule cosine --seed 1 --checkpoint-every 100)
job_fields() {
  "$HEADROOM" jobs --server "$ADDR" --json | "$PYTHON" -c '
import json, sys
for j in json.load(sys.stdin).get("jobs", []):
    if j["job_id"] == sys.argv[1]:
        f = j.get("fit") or {}
        print(j["state"], j.get("step", "0"), j.get("resumed_from_step", "0"),
              repr(float(f.get("eval_loss", "nan"))), repr(float(f.get("eval_accuracy", "nan"))),
              f.get("input_wait_fraction", 0), j.get("total_steps", "0"))' "$1"
}
job_id() { sed -n 's/^job \([^ ]*\) .*/\1/p' "$1" | head -1; }

start_headroomd
start=$SECONDS
"$HEADROOM" submit --server "$ADDR" "${JOB[@]}" --watch >"$TMP/straight.txt" 2>&1 ||
  fail "the straight job: $(tail -3 "$TMP/straight.txt")"
straight=$(job_id "$TMP/straight.txt")
read -r state _ _ loss accuracy wait total <<<"$(job_fields "$straight")"
echo "straight job $straight: $state, $total steps in $((SECONDS - start)) s; eval accuracy" \
  "$accuracy, loss $loss; input wait $wait of step time"

"$HEADROOM" submit --server "$ADDR" "${JOB[@]}" >"$TMP/killed.txt" 2>&1 ||
  fail "the second job: $(cat "$TMP/killed.txt")"
killed=$(job_id "$TMP/killed.txt")
while :; do
  read -r state step _ <<<"$(job_fields "$killed")"
  ((step >= KILL_AT)) && break
  [[ "$state" == JOB_STATE_SUCCEEDED ]] && fail "the job ended before step $KILL_AT"
  sleep 0.1
done
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=""
rm -f "$TMP/ready"
echo "headroomd SIGKILLed at step $step of $total"
start_headroomd
"$HEADROOM" watch --server "$ADDR" "$killed" >"$TMP/resumed.txt" 2>&1 ||
  fail "the resumed job: $(tail -3 "$TMP/resumed.txt")"
read -r state2 _ resumed loss2 accuracy2 wait2 _ <<<"$(job_fields "$killed")"
echo "killed job $killed: $state2, resumed from step $resumed; eval accuracy $accuracy2, loss" \
  "$loss2; input wait $wait2 of step time (after the restart)"
stop_headroomd
if [[ "$loss2" == "$loss" && "$accuracy2" == "$accuracy" ]]; then
  echo "bitwise equal: yes"
else
  echo "bitwise equal: NO"
  exit 1
fi
