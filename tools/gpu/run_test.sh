#!/usr/bin/env bash
# tools/gpu/run.sh on a machine without a GPU (CI's): a kit of the real CLI and a stand-in
# test binary must run to the end quickly, exit 0, say that no GPU is present, skip every GPU
# step (the stand-in test never runs), and write summary.txt and a valid figures.json.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
TMP="${TEST_TMPDIR:?}"
fail() { echo "FAIL: $*" >&2; [ -f "$TMP/run.out" ] && cat "$TMP/run.out" >&2; exit 1; }

if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  echo "a GPU is present: this test checks the GPU-less path only (the kit runs in full here)"
  exit 0
fi

# The kit as make_kit.sh lays it out, with the CLI built by Bazel (its runpath finds the
# CUDA libraries where the toolkit is) and a test binary that leaves a mark if it is run.
K=$TMP/kit; mkdir -p "$K/bin" "$K/lib" "$K/fallback"
cp "$RUNFILES/tools/gpu/run.sh" "$RUNFILES/tools/gpu/figures.py" "$RUNFILES/tools/gpu/torch_step_time.py" "$K/"
cp "$RUNFILES/clients/headroom" "$K/bin/headroom"
printf '#!/bin/sh\ntouch "%s/ran"\n' "$TMP" >"$K/bin/fake_cuda_test"; chmod +x "$K/bin/fake_cuda_test"
echo "commit test" >"$K/MANIFEST"

OUT=$TMP/out
start=$(date +%s)
rc=0; OUT=$OUT KIT_SECONDS=120 timeout 60 bash "$K/run.sh" >"$TMP/run.out" 2>&1 || rc=$?
secs=$(($(date +%s) - start))
cat "$TMP/run.out"
[ "$rc" -eq 0 ] || fail "run.sh exited $rc"
[ "$secs" -le 30 ] || fail "run.sh took ${secs}s without a GPU (at most 30)"
[ ! -e "$TMP/ran" ] || fail "the GPU test binary ran without a GPU"
grep -q "no GPU present" "$OUT/summary.txt" || fail "summary.txt does not say that no GPU is present"
grep -q "SKIP  test:fake_cuda_test" "$OUT/summary.txt" || fail "summary.txt does not list the test as skipped"
grep -q "^done in " "$OUT/summary.txt" || fail "summary.txt has no final line"
[ -s "$OUT/env.txt" ] || fail "no env.txt"
n=$(ls "$OUT" | wc -l); [ "$n" -le 8 ] || fail "$n files in OUT (the device tool brings back 8)"

python3 - "$OUT/figures.json" <<'PY' || fail "figures.json is not what it should be"
import json, sys
f = json.load(open(sys.argv[1]))
assert f["gpu_present"] is False, f["gpu_present"]
steps = f["steps"]
assert steps["binaries_load"]["status"] == "pass", steps["binaries_load"]
gpu_steps = {n: s for n, s in steps.items() if n != "binaries_load"}
assert len(gpu_steps) >= 15, sorted(gpu_steps)
for name, s in gpu_steps.items():
    assert s["status"] == "skip" and s["detail"] == "no GPU present", (name, s)
for name in ("test:fake_cuda_test", "train:r50_plain", "train:r50_sectioned", "torch:resnet50",
             "profile:cupti", "daemon:job", "sanitizer:memcheck:cnn", "sanitizer:racecheck:gpt"):
    assert name in steps, name
assert f["tests"]["fake_cuda_test"]["status"] == "skip"
assert f["bitwise"]["determinism_resnet18_b32"]["verdict"] == "not compared"
assert f["step_seconds"]["resnet50_b64"]["headroom_over_pytorch"] is None
assert f["counts"] == {"pass": 1, "fail": 0, "skip": len(gpu_steps)}, f["counts"]
print("figures.json: %d steps skipped, as expected" % len(gpu_steps))
PY
echo "PASS: run.sh without a GPU in ${secs}s"
