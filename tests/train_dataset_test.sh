#!/usr/bin/env bash
# `headroom train --dataset DIR` end to end on a tiny dataset directory (tools/npy_to_dataset.py,
# 8x8 images of 4 classes): bad flags fail with the flag named; a run evaluates each epoch
# and its --json summary carries eval_loss, eval_accuracy (a fraction), the input wait and
# the callbacks' overhead; checkpoints keep the last K; a run resumed from a mid-run
# checkpoint ends with exactly the straight run's evaluation (loss and accuracy), and so does
# a run with --prefetch-to-device, whose peaks grow by its staging slot.
set -euo pipefail

HEADROOM="$TEST_SRCDIR/headroom/clients/headroom"
NPY_TO_DATASET="$TEST_SRCDIR/headroom/tools/npy_to_dataset.py"
PYTHON=/usr/bin/python3
TMP="${TEST_TMPDIR:?}"

fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. A dataset: class c lights up row c of an 8x8 image, plus noise.
"$PYTHON" - "$TMP" <<'PY'
import sys
import numpy as np
rng = np.random.default_rng(3)
labels = rng.integers(0, 4, size=160).astype(np.uint8)
images = rng.integers(0, 200, size=(160, 8, 8)).astype(np.uint8)
for i, c in enumerate(labels):
    images[i, c, :] += 40
np.save(sys.argv[1] + "/images.npy", images)
np.save(sys.argv[1] + "/labels.npy", labels)
PY
"$PYTHON" "$NPY_TO_DATASET" "$TMP/images.npy" "$TMP/labels.npy" "$TMP/set" --classes 4 \
  --shard-items 64 >/dev/null

MODEL=(--model small_cnn --image_size 8 --channels 1 --classes 4 --batch 8)

# 2. Bad flags name the flag.
expect_error() {
  local want="$1"
  shift
  local out rc=0
  out=$("$HEADROOM" train "$@" 2>&1) || rc=$?
  ((rc != 0)) || fail "'headroom train $*' succeeded; wanted an error with '$want'"
  [[ "$out" == *"$want"* ]] || fail "'headroom train $*' said: $out; wanted '$want'"
  echo "ok   error: $want"
}
expect_error "--eval-every applies to training on a --dataset" "${MODEL[@]}" --eval-every 2
expect_error "has no test part to evaluate on" "${MODEL[@]}" --dataset "$TMP/set"
expect_error "--steps is the synthetic task's" "${MODEL[@]}" --dataset "$TMP/set" \
  --validation-fraction 0.2 --steps 3
expect_error "--lr-schedule" "${MODEL[@]}" --dataset "$TMP/set" --validation-fraction 0.2 \
  --lr-schedule linear
expect_error "--keep-last needs --checkpoint-dir" "${MODEL[@]}" --dataset "$TMP/set" \
  --validation-fraction 0.2 --keep-last 2
expect_error "cannot open dataset index" "${MODEL[@]}" --dataset "$TMP/nowhere" --eval-every 0

# 3. A run of 3 epochs (16 batches each) with checkpoints every 5 steps, keeping 2.
RUN=("${MODEL[@]}" --dataset "$TMP/set" --validation-fraction 0.2 --epochs 3 --lr 0.05
     --lr-schedule cosine --warmup-steps 4 --json --progress-seconds 0)
"$HEADROOM" train "${RUN[@]}" --checkpoint-dir "$TMP/ck" --checkpoint-every-steps 5 \
  --checkpoint-every-epochs 0 --keep-last 2 >"$TMP/straight.json" ||
  fail "the straight run failed: $(cat "$TMP/straight.json")"
"$PYTHON" - "$TMP/straight.json" <<'PY' || fail "the straight run's output"
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
epochs = [l for l in lines if "epoch" in l and not l.get("summary")]
s = lines[-1]
assert s["summary"] and s["epochs"] == 3 and s["steps_run"] == 48, s
assert [e["epoch"] for e in epochs] == [0, 1, 2], epochs
assert all("eval_accuracy" in e for e in epochs), epochs
assert 0 <= s["eval_accuracy"] <= 1 and s["eval_items"] == 32, s
assert s["eval_accuracy"] == epochs[-1]["eval_accuracy"], (s, epochs[-1])
assert s["input_wait_fraction"] >= 0 and s["callback_overhead_fraction"] >= 0, s
assert s["measured_peak_bytes"] <= s["predicted_peak_bytes"], s
print("ok   straight run: eval accuracy %.3f, loss %.5f" % (s["eval_accuracy"], s["eval_loss"]))
PY
kept=$(cd "$TMP/ck" && ls | sort | tr '\n' ' ')
[[ "$kept" == "best.hrfit checkpoint-000000040.hrfit checkpoint-000000045.hrfit " ]] ||
  fail "checkpoints kept: $kept"
echo "ok   kept: $kept"

# 4. Resume from step 20's checkpoint (mid-epoch 1): the same final evaluation, exactly.
"$HEADROOM" train "${RUN[@]}" --checkpoint-dir "$TMP/ck2" --checkpoint-every-steps 20 \
  --checkpoint-every-epochs 0 --keep-last 5 >/dev/null || fail "the run to resume failed"
rm "$TMP/ck2/checkpoint-000000040.hrfit"
"$HEADROOM" train "${RUN[@]}" --resume "$TMP/ck2" >"$TMP/resumed.json" 2>"$TMP/resumed.err" ||
  fail "the resumed run failed: $(cat "$TMP/resumed.err")"
grep -q "resuming from '$TMP/ck2/checkpoint-000000020.hrfit' at epoch 2, batch 4 (step 20)" \
  "$TMP/resumed.err" || fail "resume said: $(cat "$TMP/resumed.err")"
"$PYTHON" - "$TMP/straight.json" "$TMP/resumed.json" <<'PY' || fail "resumed != straight"
import json, sys
a = json.loads(open(sys.argv[1]).readlines()[-1])
b = json.loads(open(sys.argv[2]).readlines()[-1])
for key in ("eval_loss", "eval_accuracy", "steps_run", "last_loss"):
    assert a[key] == b[key], (key, a[key], b[key])
print("ok   resumed run: eval loss %r, accuracy %r, as the straight run" % (b["eval_loss"],
      b["eval_accuracy"]))
PY

# 5. --prefetch-to-device (the next batch staged in a planned slot during the step): the same
#    numbers, to the last bit; the predicted and the measured peak each grow by the slot.
expect_error "--prefetch-to-device applies to training on a --dataset" "${MODEL[@]}" \
  --prefetch-to-device
"$HEADROOM" train "${RUN[@]}" --prefetch-to-device >"$TMP/prefetch.json" ||
  fail "the run with --prefetch-to-device failed: $(cat "$TMP/prefetch.json")"
"$PYTHON" - "$TMP/straight.json" "$TMP/prefetch.json" <<'PY' || fail "prefetch != straight"
import json, sys
a = json.loads(open(sys.argv[1]).readlines()[-1])
b = json.loads(open(sys.argv[2]).readlines()[-1])
for key in ("eval_loss", "eval_accuracy", "steps_run", "first_loss", "last_loss"):
    assert a[key] == b[key], (key, a[key], b[key])
# 8 images of 8x8 float32 (2,048 B) and 8 int64 labels (64 B, rounded up to 256 B).
assert a["staging_slot_bytes"] == 0 and b["staging_slot_bytes"] == 2048 + 256, (a, b)
slot = b["staging_slot_bytes"]
assert b["predicted_peak_bytes"] == a["predicted_peak_bytes"] + slot, (a, b)
assert b["measured_peak_bytes"] == a["measured_peak_bytes"] + slot, (a, b)
assert b["measured_peak_bytes"] <= b["predicted_peak_bytes"], b
print("ok   --prefetch-to-device: eval loss %r as the straight run; peak %d B, slot %d B" %
      (b["eval_loss"], b["predicted_peak_bytes"], slot))
PY
echo PASS
