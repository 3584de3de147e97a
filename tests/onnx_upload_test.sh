#!/usr/bin/env bash
# `headroom submit --onnx FILE` and the Python client's submit(onnx(FILE)) against a real
# headroomd whose --max-message-bytes (1 MiB) is below the model's size (squeezenet1_1 of
# tools/export_onnx.py, 4.9 MB): both stream the file through UploadJob, and the job trains
# from the model's own weights, so its first loss is the one `headroom train --onnx FILE`
# computes here (same seed and batch, one OpenMP thread). A model over --max-upload-bytes is
# refused with RESOURCE_EXHAUSTED naming the limit.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
HEADROOMD="$RUNFILES/server/headroomd"
HEADROOM="$RUNFILES/clients/headroom"
MODEL="$RUNFILES/tests/onnx/squeezenet1_1.onnx"
PYTHON=/usr/bin/python3
TMP="${TEST_TMPDIR:?}"
export PYTHONPATH="$RUNFILES/clients/python"
export PYTHONDONTWRITEBYTECODE=1
export OMP_NUM_THREADS=1

# shellcheck source=tests/headroomd_test_lib.sh
source "$RUNFILES/tests/headroomd_test_lib.sh"

size=$(stat -L -c %s "$MODEL")
((size > 4 * 1024 * 1024)) || fail "the model is $size bytes; the test needs one over 4 MiB"
start_headroomd --max-message-bytes 1MiB --max-upload-bytes 16MiB

# The reference: the first loss of the model's own weights, trained here.
"$HEADROOM" train --onnx "$MODEL" --batch 2 --steps 1 --seed 3 --json >"$TMP/train.json" ||
  fail "headroom train --onnx failed"
reference=$(tail -n 1 "$TMP/train.json" | "$PYTHON" -c 'import json,sys; print(json.load(sys.stdin)["first_loss"])')
echo "headroom train --onnx: first loss $reference"

# Returns 0 when the losses $1 and $2 agree to 1e-5 (relative).
same_loss() {
  "$PYTHON" -c 'import sys; a, b = map(float, sys.argv[1:]); sys.exit(abs(a - b) > 1e-5 * abs(a))' "$1" "$2"
}

# 1. The CLI.
start=$(date +%s.%N)
"$HEADROOM" submit --onnx "$MODEL" --batch 2 --steps 1 --seed 3 --name cli-upload \
  --server "$ADDR" --watch --json >"$TMP/submit.json" || fail "headroom submit --onnx failed"
end=$(date +%s.%N)
echo "headroom submit --onnx --watch: $size bytes, $("$PYTHON" -c "print(round($end - $start, 2))") s to the job's end"
loss=$(tail -n 1 "$TMP/submit.json" | "$PYTHON" -c '
import json, sys
p = json.load(sys.stdin)
assert p["state"] == "JOB_STATE_SUCCEEDED", p
print(p["loss"])') || fail "the job did not succeed: $(tail -n 1 "$TMP/submit.json")"
same_loss "$reference" "$loss" ||
  fail "the uploaded job's first loss $loss is not the model's own $reference: not its weights"
echo "headroom submit --onnx: first loss $loss"

# 2. The Python client, and a refusal over --max-upload-bytes.
"$PYTHON" - "$ADDR" "$MODEL" "$reference" <<'PY' || fail "the Python client's upload failed"
import sys
from headroom_client import Client, HeadroomError, onnx

address, model, reference = sys.argv[1], sys.argv[2], float(sys.argv[3])
with Client(address, timeout=120) as client:
    submitted = client.submit(onnx(model, batch=2), steps=1, seed=3, name="python-upload")
    last = client.wait(submitted.job_id)
    assert last.state == 3, f"job {submitted.job_id} ended {last.state}: {last.message}"
    assert abs(last.loss - reference) <= 1e-5 * abs(reference), (last.loss, reference)
    with open(model, "rb") as f:
        big = f.read() * 4  # 19.6 MB: over the daemon's 16 MiB --max-upload-bytes
    try:
        client.submit(onnx(big, batch=2), steps=1)
        raise AssertionError("a model over --max-upload-bytes was taken")
    except HeadroomError as err:
        assert err.code == "RESOURCE_EXHAUSTED", err
        assert "--max-upload-bytes of 16777216 bytes" in str(err), err
    names = sorted(job.name for job in client.jobs())
    assert names == ["cli-upload", "python-upload"], names
print(f"python client: first loss {last.loss}")
PY

stop_headroomd
echo "PASS"
