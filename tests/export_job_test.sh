#!/usr/bin/env bash
# `headroom export --job` against a real headroomd: a small_cnn job trained to its end keeps
# its last checkpoint, and its export (ExportModel) is a valid ONNX model of the trained
# weights: it names the job's last step, runs in PyTorch (tools/onnx_torch.py) within 1e-5 of
# Headroom's logits of the same file imported back (tools/inference_logits), and survives a
# daemon restart. A job that was cancelled has no checkpoint (FAILED_PRECONDITION, exit 1);
# an unknown job is NOT_FOUND.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
HEADROOM="$RUNFILES/clients/headroom"
HEADROOMD="$RUNFILES/server/headroomd"
LOGITS="$RUNFILES/tools/inference_logits"
TORCH="$RUNFILES/tools/onnx_torch.py"
PYTHON=/usr/bin/python3
TMP="${TEST_TMPDIR:?}"

# shellcheck source=tests/headroomd_test_lib.sh
source "$RUNFILES/tests/headroomd_test_lib.sh"

start_headroomd
echo "headroomd: $ADDR"

# 1. A job trained to its end.
"$HEADROOM" submit --server "$ADDR" --model small_cnn --batch 4 --steps 6 \
  --checkpoint-every 4 --watch >"$TMP/submit.txt" 2>&1 || fail "submit exited $?: $(cat "$TMP/submit.txt")"
JOB=$(sed -n 's/^job \([^ ]*\) .*/\1/p' "$TMP/submit.txt" | head -1)
[[ -n "$JOB" ]] || fail "no job id in: $(cat "$TMP/submit.txt")"
grep -q "SUCCEEDED" "$TMP/submit.txt" || fail "the job did not succeed: $(cat "$TMP/submit.txt")"

# 2. Its export: the weights of its last step (6), not of its checkpoint at step 4.
"$HEADROOM" export --server "$ADDR" --job "$JOB" --out "$TMP/job.onnx" >"$TMP/export.txt" 2>&1 ||
  fail "export exited $?: $(cat "$TMP/export.txt")"
cat "$TMP/export.txt"
grep -q "weights at step 6" "$TMP/export.txt" || fail "the export is not of step 6"
[[ -s "$TMP/job.onnx" ]] || fail "no model written"

# 3. PyTorch runs it; Headroom imports it back; the logits agree.
"$PYTHON" - "$TMP" <<'PY' || fail "inputs"
import sys, numpy as np
np.random.default_rng(3).standard_normal((4, 1, 28, 28)).astype(np.float32).tofile(sys.argv[1] + "/x.bin")
PY
"$PYTHON" "$TORCH" "$TMP/job.onnx" "$TMP/x.bin" "$TMP/torch.bin" || fail "PyTorch could not run the export"
"$LOGITS" --onnx "$TMP/job.onnx" --batch 4 --inputs "$TMP/x.bin" --out "$TMP/headroom.bin" ||
  fail "Headroom could not import the export back"
"$PYTHON" - "$TMP" <<'PY' || fail "the export's logits differ between PyTorch and Headroom"
import sys, numpy as np
t = np.fromfile(sys.argv[1] + "/torch.bin", dtype=np.float32)
h = np.fromfile(sys.argv[1] + "/headroom.bin", dtype=np.float32)
error = float(np.abs(t - h).max() / np.abs(t).max())
print(f"job export: {t.size} logits, relative error {error:.2e}")
sys.exit(0 if t.size == 40 and error <= 1e-5 else 1)
PY

# 4. A cancelled job keeps no checkpoint; an unknown job is not found.
"$HEADROOM" submit --server "$ADDR" --model small_cnn --batch 4 --steps 100000 \
  >"$TMP/long.txt" 2>&1 || fail "second submit exited $?"
LONG=$(sed -n 's/^job \([^ ]*\) .*/\1/p' "$TMP/long.txt" | head -1)
"$HEADROOM" cancel --server "$ADDR" "$LONG" >/dev/null 2>&1 || fail "cancel exited $?"
rc=0
"$HEADROOM" export --server "$ADDR" --job "$LONG" --out "$TMP/none.onnx" >"$TMP/none.txt" 2>&1 || rc=$?
((rc == 1)) || fail "export of a cancelled job exited $rc: $(cat "$TMP/none.txt")"
grep -q "FAILED_PRECONDITION.*has no checkpoint" "$TMP/none.txt" || fail "$(cat "$TMP/none.txt")"
[[ ! -e "$TMP/none.onnx" ]] || fail "a model was written for a job without weights"
rc=0
"$HEADROOM" export --server "$ADDR" --job job-999999 --out "$TMP/none.onnx" >"$TMP/nf.txt" 2>&1 || rc=$?
((rc == 1)) && grep -q "NOT_FOUND" "$TMP/nf.txt" || fail "unknown job: exit $rc: $(cat "$TMP/nf.txt")"

# 5. After a restart the finished job's weights are still there.
stop_headroomd
start_headroomd
"$HEADROOM" export --server "$ADDR" --job "$JOB" --out "$TMP/again.onnx" >"$TMP/again.txt" 2>&1 ||
  fail "export after a restart exited $?: $(cat "$TMP/again.txt")"
cmp -s "$TMP/job.onnx" "$TMP/again.onnx" || fail "the export changed across a restart"
stop_headroomd
echo "PASS"
