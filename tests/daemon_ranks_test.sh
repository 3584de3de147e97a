#!/usr/bin/env bash
# A data-parallel job on a real headroomd (issue 21, item 8): `headroom submit --ranks 2`
# starts two headroomd_rank processes under mpirun.
#  1. Refusals at submit: more ranks than --max-ranks, and ranks whose plans together
#     exceed --device-memory, each naming the limit.
#  2. A straight run of 2 ranks to its end: watch shows every rank's memory; the metrics
#     carry rank="0" and rank="1"; no rank process is left.
#  2b. spec.plan.data_parallel's bucket size and sync batch norm reach the ranks.
#  3. The same job, headroomd SIGKILLed after its first checkpoint: no rank outlives it; the
#     restarted daemon resumes it from the checkpoint with 2 ranks, and it ends with the
#     straight run's loss, bitwise.
#  4. A rank SIGKILLed mid-job fails the job naming rank 1; a cancelled job stops every rank.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
HEADROOM="$RUNFILES/clients/headroom"
HEADROOMD="$RUNFILES/server/headroomd"
PYTHON=/usr/bin/python3
TMP="${TEST_TMPDIR:?}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# shellcheck source=tests/headroomd_test_lib.sh
source "$RUNFILES/tests/headroomd_test_lib.sh"

DAEMON_FLAGS=(--max-ranks 64 --checkpoint-every 50)
start_headroomd "${DAEMON_FLAGS[@]}"
echo "headroomd: $ADDR"
METRICS=$(sed -n 's/^metrics=//p' "$TMP/ready")
JOB=(--model mlp --width 256 --batch 8 --seed 3 --ranks 2)
STEPS=1000

# Prints "STATE STEP RESUMED LOSS RANKS ERROR" of job $1 (the loss as repr: exact).
job_fields() {
  "$HEADROOM" jobs --server "$ADDR" --json | "$PYTHON" -c '
import json, sys
for j in json.load(sys.stdin).get("jobs", []):
    if j["job_id"] == sys.argv[1]:
        print(j["state"], j.get("step", "0"), j.get("resumed_from_step", "0"),
              repr(float(j.get("loss", 0))), len(j.get("ranks", [])),
              j.get("error", "-").replace(" ", "_"))' "$1"
}

# Prints the pids of job $1's rank processes.
rank_pids() { pgrep -f "headroomd_rank --dir=$TMP/state/ranks/$1 " || true; }

# Waits up to $2 seconds for job $1's rank processes to be gone.
expect_no_ranks() {
  for _ in $(seq $((${2} * 10))); do
    [[ -z "$(rank_pids "$1")" ]] && return 0
    sleep 0.1
  done
  fail "job $1's ranks still run after $2 s: $(rank_pids "$1" | tr '\n' ' ')"
}

submit() {
  local out
  out=$("$HEADROOM" submit --server "$ADDR" "$@" 2>&1) || fail "submit $*: $out"
  sed -n 's/^job \([^ ]*\) .*/\1/p' <<<"$out" | head -1
}

# Waits until job $1 reaches step $2 or more, running.
wait_for_step() {
  local state step
  for _ in $(seq 1200); do
    read -r state step _ <<<"$(job_fields "$1")"
    ((step >= $2)) && [[ "$state" == JOB_STATE_RUNNING ]] && return 0
    [[ "$state" == JOB_STATE_SUCCEEDED || "$state" == JOB_STATE_FAILED ]] &&
      fail "job $1 ended ($state at step $step) before step $2"
    sleep 0.1
  done
  fail "job $1 did not reach step $2 in 120 s"
}

# 1. Refusals.
expect_refused "spec.ranks: 65 ranks, more than this daemon's --max-ranks 64" \
  --model mlp --width 256 --batch 8 --steps 5 --ranks 65
expect_refused "spec.ranks: the 60 ranks' plans need 60 x" --model mlp --width 256 --batch 8 \
  --steps 5 --ranks 60
expect_refused "than device cpu:0's memory of 64.0 MiB (67108864 bytes, --device-memory)" \
  --model mlp --width 256 --batch 8 --steps 5 --ranks 60
"$HEADROOM" jobs --server "$ADDR" | grep -q "^no jobs" || fail "a refused job was stored"

# 2. The straight run, watched.
"$HEADROOM" submit --server "$ADDR" "${JOB[@]}" --steps "$STEPS" --watch >"$TMP/straight.txt" 2>&1 ||
  fail "the straight job: $(tail -5 "$TMP/straight.txt")"
STRAIGHT=$(sed -n 's/^job \([^ ]*\) .*/\1/p' "$TMP/straight.txt" | head -1)
read -r state step resumed loss ranks _ <<<"$(job_fields "$STRAIGHT")"
[[ "$state" == JOB_STATE_SUCCEEDED && "$step" == "$STEPS" && "$ranks" == 2 ]] ||
  fail "straight job: $state at step $step with $ranks ranks; wanted SUCCEEDED at $STEPS with 2"
grep -q "\[rank 0: step [0-9]*, arena [0-9.]* [KM]iB, resident [0-9.]* MiB\]" "$TMP/straight.txt" &&
  grep -q "\[rank 1: step " "$TMP/straight.txt" ||
  fail "watch shows no memory of each rank: $(tail -2 "$TMP/straight.txt")"
echo "ok   straight run $STRAIGHT of 2 ranks: loss $loss; $(grep -o '\[rank 1:[^]]*\]' "$TMP/straight.txt" | tail -1)"
expect_no_ranks "$STRAIGHT" 5
"$PYTHON" - "$METRICS" "$STRAIGHT" "$STEPS" <<'PY' || fail "metrics"
import sys, urllib.request
text = urllib.request.urlopen("http://%s/metrics" % sys.argv[1]).read().decode()
job = 'job="%s"' % sys.argv[2]
def value(name, rank=None):
    for line in text.splitlines():
        if not line.startswith(name + "{") or job not in line:
            continue
        labelled = 'rank="' in line
        if (rank is None and not labelled) or (rank is not None and 'rank="%d"' % rank in line):
            return float(line.rsplit(" ", 1)[1])
    raise SystemExit("no %s (rank %s) for %s in:\n%s" % (name, rank, job, text))
peaks = [value("headroom_measured_peak_bytes", r) for r in (0, 1)]
resident = [value("headroom_rank_resident_bytes", r) for r in (0, 1)]
assert all(p > 0 for p in peaks), peaks
assert all(r > 1 << 20 for r in resident), resident
assert value("headroom_measured_peak_bytes") == sum(peaks), (value("headroom_measured_peak_bytes"), peaks)
assert value("headroom_step_duration_seconds_count") == int(sys.argv[3]), value("headroom_step_duration_seconds_count")
ranks = {l.split('rank="')[1].split('"')[0] for l in text.splitlines() if job in l and 'rank="' in l}
assert ranks == {"0", "1"}, ranks
print("ok   metrics: measured peak by rank %s, resident %s" % (peaks, resident))
PY

# 2b. The ranks' buckets and batch norms as submitted (spec.plan.data_parallel): small_cnn
#     with --sync-batchnorm and 16 KiB buckets trains what one process at the global batch
#     trains (each rank checks its plan's peak, with those buckets, against the admitted
#     one); without --sync-batchnorm each rank normalises its own shard and the loss differs.
expect_refused "sync_batch_norm: the model has no batch norm" --model mlp --width 256 --batch 8 \
  --steps 5 --ranks 2 --sync-batchnorm
BN=(--model small_cnn --batch 8 --seed 3 --ranks 2 --steps 5 --bucket-kib 16)
for sync in "--sync-batchnorm" ""; do
  # shellcheck disable=SC2086
  "$HEADROOM" submit --server "$ADDR" "${BN[@]}" $sync --watch >"$TMP/bn.txt" 2>&1 ||
    fail "small_cnn ${sync:-without sync}: $(tail -5 "$TMP/bn.txt")"
  read -r state step _ bn_loss _ _ <<<"$(job_fields "$(sed -n 's/^job \([^ ]*\) .*/\1/p' "$TMP/bn.txt" | head -1)")"
  [[ "$state" == JOB_STATE_SUCCEEDED && "$step" == 5 ]] || fail "small_cnn $sync: $state at $step"
  if [[ -n "$sync" ]]; then synced=$bn_loss; else unsynced=$bn_loss; fi
done
one=$("$HEADROOM" train --model small_cnn --batch 16 --seed 3 --steps 5 --json |
      grep '"step":4,' | sed -n 's/.*"loss":\([0-9.e+-]*\).*/\1/p')
"$PYTHON" - "$synced" "$unsynced" "$one" <<'PY' || fail "small_cnn across ranks against one process"
import sys
synced, unsynced, one = map(float, sys.argv[1:])
assert abs(synced - one) <= 1e-5 * abs(one), (synced, one)
assert abs(unsynced - one) > 1e-4 * abs(one), (unsynced, one)
print("ok   small_cnn, 2 ranks x 8, 16 KiB buckets: step 4's loss %r with --sync-batchnorm, "
      "%r without, %r in one process at 16" % (synced, unsynced, one))
PY

# 3. The same job, headroomd SIGKILLed after its checkpoint at step 50.
KILLED=$(submit "${JOB[@]}" --steps "$STEPS")
wait_for_step "$KILLED" 60
[[ -n "$(rank_pids "$KILLED")" ]] || fail "no rank processes of $KILLED while it runs"
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=""
expect_no_ranks "$KILLED" 10
echo "ok   headroomd killed with SIGKILL at step 60 or a little after; no rank outlived it"
start_headroomd "${DAEMON_FLAGS[@]}"
"$HEADROOM" watch --server "$ADDR" "$KILLED" >"$TMP/resumed.txt" 2>&1 ||
  fail "the resumed job: $(tail -3 "$TMP/resumed.txt")"
read -r state step resumed loss2 ranks _ <<<"$(job_fields "$KILLED")"
[[ "$state" == JOB_STATE_SUCCEEDED && "$step" == "$STEPS" && "$ranks" == 2 ]] ||
  fail "resumed job: $state at step $step with $ranks ranks; wanted SUCCEEDED at $STEPS with 2"
((resumed >= 50 && resumed < STEPS)) || fail "resumed from step $resumed; wanted a checkpoint >= 50"
[[ "$loss2" == "$loss" ]] || fail "resumed run's loss $loss2; straight: $loss"
echo "ok   resumed from step $resumed with 2 ranks: loss $loss2, bitwise the straight run's"

# 4. A rank killed: the job fails naming it. A cancel stops every rank.
DYING=$(submit "${JOB[@]}" --steps 100000)
wait_for_step "$DYING" 3
victim=""
for pid in $(rank_pids "$DYING"); do
  tr '\0' '\n' <"/proc/$pid/environ" | grep -qx "OMPI_COMM_WORLD_RANK=1" && victim=$pid
done
[[ -n "$victim" ]] || fail "no process of rank 1 found"
kill -KILL "$victim"
for _ in $(seq 300); do
  read -r state step _ _ _ error <<<"$(job_fields "$DYING")"
  [[ "$state" == JOB_STATE_FAILED ]] && break
  sleep 0.1
done
[[ "$state" == JOB_STATE_FAILED && "$error" == *"rank_1_of_2_died"* ]] ||
  fail "after rank 1 was killed: $state, error '$error'"
expect_no_ranks "$DYING" 10
echo "ok   rank 1 killed: FAILED, '${error//_/ }'"

CANCELLED=$(submit "${JOB[@]}" --steps 100000)
wait_for_step "$CANCELLED" 2
"$HEADROOM" cancel --server "$ADDR" "$CANCELLED" >/dev/null || fail "cancel"
expect_no_ranks "$CANCELLED" 10
read -r state _ <<<"$(job_fields "$CANCELLED")"
[[ "$state" == JOB_STATE_CANCELLED ]] || fail "cancelled job is $state"
echo "ok   cancelled: every rank stopped"
stop_headroomd
echo "PASS"
