#!/usr/bin/env bash
# A dataset job on a real headroomd (issue 23's daemon part): small_cnn on a 3,000-image
# subset of Fashion-MNIST (tools/npy_to_dataset.py) under --data-root.
#  1. The data-root rule: a dataset outside the root, reached by "..", or through a symlink
#     that points out is INVALID_ARGUMENT naming the path and the root; a bad index file and
#     a model whose input does not fit the images are refused at submit too.
#  2. A straight run: `headroom submit --watch` shows the epoch and the validation accuracy;
#     the job's info carries them; the metrics endpoint exports them.
#  3. The same job again, headroomd SIGKILLed mid-epoch and started again: it resumes from its
#     last checkpoint and ends with exactly (bitwise) the straight run's eval loss and accuracy.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
HEADROOM="$RUNFILES/clients/headroom"
HEADROOMD="$RUNFILES/server/headroomd"
NPY_TO_DATASET="$RUNFILES/tools/npy_to_dataset.py"
PYTHON=/usr/bin/python3
TMP="${TEST_TMPDIR:?}"

# shellcheck source=tests/headroomd_test_lib.sh
source "$RUNFILES/tests/headroomd_test_lib.sh"

# 1. The data: the first 3,000 training images of Fashion-MNIST, as a dataset directory under
#    the data root, a copy outside it, and a broken one.
mkdir -p "$TMP/data" "$TMP/outside"
"$PYTHON" - "$TMP" <<'PY' || fail "reading Fashion-MNIST"
import gzip, sys
import numpy as np
d = "/usr/share/datasets/fashion-mnist/"
with gzip.open(d + "train-images-idx3-ubyte.gz") as f:
    images = np.frombuffer(f.read(), np.uint8, offset=16).reshape(-1, 28, 28)[:3000]
with gzip.open(d + "train-labels-idx1-ubyte.gz") as f:
    labels = np.frombuffer(f.read(), np.uint8, offset=8)[:3000]
np.save(sys.argv[1] + "/images.npy", images)
np.save(sys.argv[1] + "/labels.npy", labels)
PY
"$PYTHON" "$NPY_TO_DATASET" "$TMP/images.npy" "$TMP/labels.npy" "$TMP/data/fmnist" \
  --classes 10 --shard-items 1000 >/dev/null || fail "npy_to_dataset"
cp -r "$TMP/data/fmnist" "$TMP/outside/fmnist"
ln -s "$TMP/outside" "$TMP/data/escape"
mkdir -p "$TMP/data/broken"
echo "this is no index" >"$TMP/data/broken/index.txt"

start_headroomd --data-root "$TMP/data"
echo "headroomd: $ADDR"
METRICS=$(sed -n 's/^metrics=//p' "$TMP/ready")

JOB_FLAGS=(--model small_cnn --batch 32 --image_size 28 --channels 1 --classes 10 --lr 0.05
           --seed 7 --epochs 3 --eval-every 1 --validation-fraction 0.2 --lr-schedule cosine
           --warmup-steps 10 --checkpoint-every 10 --keep-last 2)

REAL_ROOT=$(realpath "$TMP/data")
for bad in "$TMP/outside/fmnist" "$TMP/data/../outside/fmnist" "$TMP/data/escape/fmnist"; do
  expect_refused "outside this daemon's data roots: '$REAL_ROOT'" "${JOB_FLAGS[@]}" --dataset "$bad"
  expect_refused "INVALID_ARGUMENT" "${JOB_FLAGS[@]}" --dataset "$bad"
done
expect_refused "does not resolve" "${JOB_FLAGS[@]}" --dataset "$TMP/data/nothing"
expect_refused "$TMP/data/broken" "${JOB_FLAGS[@]}" --dataset "$TMP/data/broken"
expect_refused "spec.data.dataset '$TMP/data/fmnist'" --model small_cnn --batch 32 \
  --image_size 32 --channels 1 --classes 10 --epochs 1 --validation-fraction 0.2 \
  --dataset "$TMP/data/fmnist"
expect_refused "--steps is the synthetic task's" "${JOB_FLAGS[@]}" --dataset "$TMP/data/fmnist" \
  --steps 5
"$HEADROOM" jobs --server "$ADDR" | grep -q "^no jobs" || fail "a refused job was stored"

# Prints "STATE STEP RESUMED EVAL_LOSS EVAL_ACCURACY EPOCH" of job $1 (doubles as repr:
# exact).
job_fields() {
  "$HEADROOM" jobs --server "$ADDR" --json | "$PYTHON" -c '
import json, sys
for j in json.load(sys.stdin).get("jobs", []):
    if j["job_id"] == sys.argv[1]:
        f = j.get("fit") or {}
        print(j["state"], j.get("step", "0"), j.get("resumed_from_step", "0"),
              repr(float(f.get("eval_loss", "nan"))), repr(float(f.get("eval_accuracy", "nan"))),
              f.get("epoch", "0"))' "$1"
}

# 2. The straight run, watched.
"$HEADROOM" submit --server "$ADDR" "${JOB_FLAGS[@]}" --dataset "$TMP/data/fmnist" --watch \
  >"$TMP/straight.txt" 2>&1 || fail "the straight job: $(tail -5 "$TMP/straight.txt")"
STRAIGHT=$(sed -n 's/^job \([^ ]*\) .*/\1/p' "$TMP/straight.txt" | head -1)
grep -q "epoch 3/3  val acc [0-9.]*% loss [0-9.]* (epoch 3)" "$TMP/straight.txt" ||
  fail "watch shows no epoch 3/3 with its validation accuracy: $(tail -3 "$TMP/straight.txt")"
grep -q "epoch 1/3" "$TMP/straight.txt" || fail "watch never showed epoch 1/3"
read -r state step resumed loss accuracy epoch <<<"$(job_fields "$STRAIGHT")"
[[ "$state" == JOB_STATE_SUCCEEDED && "$step" == 225 && "$epoch" == 3 ]] ||
  fail "straight job: $state at step $step, epoch $epoch; wanted SUCCEEDED at 225, epoch 3"
"$PYTHON" -c "import sys; a=float(sys.argv[1]); sys.exit(0 if 0.6 < a <= 1 else 1)" "$accuracy" ||
  fail "straight job's eval accuracy $accuracy: not trained"
echo "ok   straight run $STRAIGHT: eval accuracy $accuracy, loss $loss"
"$PYTHON" - "$METRICS" "$STRAIGHT" "$accuracy" "$loss" <<'PY' || fail "metrics"
import sys, urllib.request
text = urllib.request.urlopen("http://%s/metrics" % sys.argv[1]).read().decode()
def value(name):
    for line in text.splitlines():
        if line.startswith(name + "{") and 'job="%s"' % sys.argv[2] in line:
            return float(line.rsplit(" ", 1)[1])
    raise SystemExit("no %s for job %s in:\n%s" % (name, sys.argv[2], text))
assert value("headroom_job_eval_accuracy") == float(sys.argv[3]), value("headroom_job_eval_accuracy")
assert abs(value("headroom_job_eval_loss") - float(sys.argv[4])) < 1e-12
assert value("headroom_job_epoch") == 3
assert value("headroom_job_input_wait_seconds_total") >= 0
print("ok   metrics: eval accuracy, loss, epoch and input wait of the job")
PY
kept=$(cd "$TMP/state/fit/$STRAIGHT" && ls | sort | tr '\n' ' ')
[[ "$kept" == "best.hrfit checkpoint-000000210.hrfit checkpoint-000000220.hrfit " ]] ||
  fail "fit checkpoints kept: $kept"

# 3. The same job, headroomd SIGKILLed mid-epoch (after step 90: in epoch 2 of 75-step
#    epochs), then started again.
"$HEADROOM" submit --server "$ADDR" "${JOB_FLAGS[@]}" --dataset "$TMP/data/fmnist" \
  >"$TMP/killed.txt" 2>&1 || fail "the second job: $(cat "$TMP/killed.txt")"
KILLED=$(sed -n 's/^job \([^ ]*\) .*/\1/p' "$TMP/killed.txt" | head -1)
for _ in $(seq 1200); do
  read -r state step _ <<<"$(job_fields "$KILLED")"
  ((step >= 90)) && break
  [[ "$state" == JOB_STATE_SUCCEEDED ]] && fail "the job ended before it could be killed"
  sleep 0.05
done
kill -KILL "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
DAEMON_PID=""
echo "ok   headroomd killed with SIGKILL at step $step or a little after"
start_headroomd --data-root "$TMP/data"
"$HEADROOM" watch --server "$ADDR" "$KILLED" >"$TMP/resumed.txt" 2>&1 ||
  fail "the resumed job: $(tail -3 "$TMP/resumed.txt")"
read -r state step resumed loss2 accuracy2 epoch <<<"$(job_fields "$KILLED")"
[[ "$state" == JOB_STATE_SUCCEEDED && "$step" == 225 ]] ||
  fail "resumed job: $state at step $step; wanted SUCCEEDED at 225"
((resumed >= 90 && resumed < 225 && resumed % 75 != 0)) ||
  fail "resumed from step $resumed: not a mid-epoch checkpoint after the kill"
[[ "$loss2" == "$loss" && "$accuracy2" == "$accuracy" ]] ||
  fail "resumed run: eval loss $loss2, accuracy $accuracy2; straight: $loss, $accuracy"
echo "ok   resumed from step $resumed: eval accuracy $accuracy2, loss $loss2, bitwise the straight run's"
stop_headroomd
echo "PASS"
