#!/bin/bash
# Headroom's GPU kit: runs the CUDA path end to end on a bare GPU machine (CUDA driver and
# toolkit, Python with PyTorch; no Bazel, no Debian libraries) and reports what it found.
#
# Usage: OUT=DIR bash kit/run.sh        (kit/ as tools/gpu/make_kit.sh packs it; docs/gpu.md)
#
# Steps, in this order, each under a time limit (the whole run ends within KIT_SECONDS,
# default 540; each phase gets a share of it, and a step that no longer fits is skipped and
# the summary says so: tests to 40%, training and PyTorch to 82%, CUPTI and the daemon to 88%):
#   1. environment: the GPU, where cuDNN/cuBLAS/NVRTC were found, that the binaries load
#   2. every GPU test binary in bin/ (gtest; cases passed, failed, skipped)
#   3. headroom train --backend cuda: resnet50 at batch 64 plain and under a budget whose plan
#      splits and offloads (losses and final parameters must be bitwise equal); determinism
#      pairs (resnet18, and a transformer with dropout and Adam, each run twice, bitwise)
#   4. the same resnet50 and transformer in this machine's PyTorch (torch_step_time.py)
#   5. headroom profile --backend cuda (CUPTI's physical account) and a headroomd job
#   6. compute-sanitizer memcheck and racecheck on short training runs
# Without a GPU every GPU step is reported as skipped ("no GPU present") and it exits 0.
# Writes to $OUT (at most 8 files, the device tool's limit): summary.txt, figures.json,
# env.txt, tests.log, runs.log, torch.log, sanitizer.log, profile.json.
# Exit status: 0 when it ran to the end (failed steps are in summary.txt and figures.json),
# 2 when it could not start (no bin/ beside it).
set -u

K=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
B=$K/bin
[ -d "$B" ] || { echo "run.sh: no bin/ in $K: unpack the kit (tools/gpu/make_kit.sh) first" >&2; exit 2; }
SCRATCH=$(mktemp -d "${TMPDIR:-/tmp}/headroom-kit.XXXXXX")
OUT=${OUT:-$SCRATCH/out}
mkdir -p "$OUT" "$SCRATCH/xml" "$SCRATCH/runs" "$SCRATCH/exp"
START=$(date +%s)
BUDGET=${KIT_SECONDS:-540}
DEADLINE=$((START + BUDGET))
RESERVE=15   # seconds kept for figures.json and the summary
S=$OUT/summary.txt; : >"$S"
STEPS=$SCRATCH/steps.tsv; : >"$STEPS"
export TEST_TMPDIR=$SCRATCH/test_tmp; mkdir -p "$TEST_TMPDIR"
# headroom and headroomd re-run themselves with this set unless it is (util/openmp_wait.h);
# set here, no run is replaced by a second process under compute-sanitizer or timeout.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-PASSIVE}

note() { echo "$*" | tee -a "$S"; }
elapsed() { echo $(($(date +%s) - START)); }
# Seconds a step may still use: to the end of its phase, keeping RESERVE for the end.
PHASE_END=$DEADLINE
left() {
  local end=$PHASE_END now; now=$(date +%s)
  [ "$end" -gt $((DEADLINE - RESERVE)) ] && end=$((DEADLINE - RESERVE))
  echo $((end - now))
}
# record NAME STATUS RC SECONDS DETAIL: one line of steps.tsv (read by figures.py).
record() {
  printf '%s\t%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" "$5" >>"$STEPS"
  note "$(printf '%-5s %-28s %s' "$(echo "$2" | tr a-z A-Z)" "$1" "$5")"
}
skip() { record "$1" skip "" 0 "$2"; }

# step NAME CAP LOG STDOUT CMD...: runs CMD with stdout to STDOUT (or LOG when "-") and
# stderr to LOG, under min(CAP, what is left); records pass (exit 0), fail or skip.
step() {
  local name=$1 cap=$2 log=$3 stdout=$4; shift 4
  if [ -z "$GPU" ]; then skip "$name" "no GPU present"; return 1; fi
  local l; l=$(left)
  if [ "$l" -lt 10 ]; then skip "$name" "no time left in its phase (the kit ends within ${BUDGET}s)"; return 1; fi
  [ "$cap" -gt "$l" ] && cap=$l
  [ "$stdout" = "-" ] && stdout=$log
  echo "===== $name ($(date -u +%T), limit ${cap}s): $*" >>"$log"
  local t0 rc; t0=$(date +%s)
  timeout -k 5 "$cap" "$@" >>"$stdout" 2>>"$log"; rc=$?
  local secs=$(($(date +%s) - t0))
  echo "===== $name: exit $rc after ${secs}s" >>"$log"
  if [ $rc -eq 0 ]; then record "$name" pass 0 "$secs" "${secs}s"
  elif [ $rc -eq 124 ] || [ $rc -eq 137 ]; then record "$name" fail $rc "$secs" "timed out after ${secs}s (limit ${cap}s)"
  else record "$name" fail $rc "$secs" "exit $rc after ${secs}s (see $(basename "$log"))"; fi
  return $rc
}

note "Headroom GPU kit: $(sed -n 's/^commit //p' "$K/MANIFEST" 2>/dev/null)"
note "started $(date -u +%Y-%m-%dT%H:%M:%SZ), deadline ${BUDGET}s, writing to $OUT"

# ---- 1. Environment -------------------------------------------------------------------
GPU=""
if command -v nvidia-smi >/dev/null 2>&1 && timeout 20 nvidia-smi -L 2>/dev/null | grep -q '^GPU '; then
  GPU=$(timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null | head -1)
  [ -n "$GPU" ] || GPU="a GPU (nvidia-smi gave no details)"
elif ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  GPU="a GPU at $(ls /dev/nvidia[0-9]* | head -1) (no nvidia-smi)"
fi
if [ -n "$GPU" ]; then note "GPU: $GPU"; else note "no GPU present: every GPU step is skipped"; fi

# Libraries the kit does not carry: cuDNN, cuBLAS and cuBLASLt (DT_NEEDED) and NVRTC and
# nvJitLink (cuDNN opens them for its runtime-compiled engines), from the toolkit, the
# system, or the Python wheels' nvidia/*/lib.
PY=$(command -v python3 || true)
lib_dirs() {
  local c
  for c in "${CUDA_PATH:-}" "${CUDA_HOME:-}" /usr/local/cuda /usr/local/cuda-*; do
    [ -n "$c" ] && echo "$c/lib64" "$c/lib" "$c/targets/x86_64-linux/lib" "$c/extras/CUPTI/lib64"
  done
  if [ -n "$PY" ]; then
    timeout 60 "$PY" - <<'EOF' 2>/dev/null
import os, site, sys
roots = []
try:
    import nvidia
    roots += list(nvidia.__path__)
except Exception:
    pass
for sp in site.getsitepackages() + [site.getusersitepackages()]:
    roots.append(os.path.join(sp, "nvidia"))
seen = set()
for r in roots:
    if os.path.isdir(r) and r not in seen:
        seen.add(r)
        for d in sorted(os.listdir(r)):
            print(os.path.join(r, d, "lib"))
try:
    import torch
    print(os.path.join(os.path.dirname(torch.__file__), "lib"))
except Exception:
    pass
EOF
  fi
  echo /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/local/lib
}
L=$K/lib
FOUND_LIBS=$SCRATCH/libs.tsv; : >"$FOUND_LIBS"
DIRS=$(lib_dirs | tr ' ' '\n' | awk 'NF && !seen[$0]++')
for n in libcudnn.so.9 libcublas.so.13 libcublasLt.so.13 libnvrtc.so.13 libnvJitLink.so.13; do
  d=""
  for c in $DIRS; do [ -e "$c/$n" ] && { d=$c; break; }; done
  printf '%s\t%s\n' "$n" "$d" >>"$FOUND_LIBS"
  if [ -z "$d" ]; then note "library $n: not found"; continue; fi
  note "library $n: $d"
  case ":$L:" in *":$d:"*) ;; *) L=$L:$d ;; esac
done
ORIG_LD_LIBRARY_PATH=${LD_LIBRARY_PATH:-}   # PyTorch runs with the machine's own libraries
export LD_LIBRARY_PATH=$L${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
# libstdc++ and libgcc_s from the kit only where the machine's are too old to load them.
if ! "$B/headroom" --help >/dev/null 2>"$SCRATCH/load.err" && grep -qE "GLIBCXX|CXXABI|GCC_[0-9]" "$SCRATCH/load.err"; then
  export LD_LIBRARY_PATH=$LD_LIBRARY_PATH:$K/fallback
  note "libstdc++: the machine's is too old; using the kit's"
fi
[ -d /usr/local/cuda/bin ] && export PATH=$PATH:/usr/local/cuda/bin
H=$B/headroom
{
  echo "date: $(date -u)"; uname -a; echo "GPU: ${GPU:-none}"
  command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi 2>&1 | head -20
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  echo "--- MANIFEST"; cat "$K/MANIFEST" 2>/dev/null
  echo "--- python: ${PY:-none}"
  [ -n "$PY" ] && timeout 60 "$PY" -c 'import sys; print(sys.version)
try:
    import torch, torchvision; print("torch", torch.__version__, "cuda", torch.version.cuda, "cudnn", torch.backends.cudnn.version(), "torchvision", torchvision.__version__)
except Exception as e: print("torch:", e)' 2>&1
  echo "--- compute-sanitizer: $(command -v compute-sanitizer || echo none)"
  for b in "$B"/*; do
    echo "--- ldd $(basename "$b")"
    ldd "$b" 2>&1 | grep -E "not found|cudnn|cublas|cupti|cudart|stdc\+\+" | sed 's/ (0x[0-9a-f]*)//'
  done
} >"$OUT/env.txt" 2>&1
UNRESOLVED=$(grep -c "not found" "$OUT/env.txt")
if "$H" zoo >/dev/null 2>>"$OUT/env.txt"; then record binaries_load pass 0 0 "headroom runs here"
else record binaries_load fail 1 0 "headroom does not start: see env.txt"; fi
[ "$UNRESOLVED" -gt 0 ] && note "WARN  $UNRESOLVED unresolved library lines in env.txt"

# ---- 2. The GPU test binaries -----------------------------------------------------------
PHASE_END=$((START + BUDGET * 40 / 100))
for t in "$B"/*; do
  n=$(basename "$t")
  case $n in headroom|headroomd) continue ;; esac
  step "test:$n" "${KIT_TEST_SECONDS:-150}" "$OUT/tests.log" - "$t" --gtest_output="xml:$SCRATCH/xml/$n.xml"
done
[ -f "$OUT/tests.log" ] && grep -E "^\[  FAILED  \] .*\(|Failure$" "$OUT/tests.log" | head -40 | sed 's/^/  /' | tee -a "$S"

# ---- 3. Training on the GPU: bitwise checks and step times --------------------------------
PHASE_END=$((START + BUDGET * 82 / 100))
R=$OUT/runs.log
# train NAME ARGS...: headroom train --backend cuda --json, steps to runs/NAME.jsonl, the
# exported inputs and final state to exp/NAME (for the bitwise comparisons).
train() {
  local name=$1; shift
  step "train:$name" "${KIT_TRAIN_SECONDS:-120}" "$R" "$SCRATCH/runs/$name.jsonl" \
    "$H" train --backend cuda --json --export "$SCRATCH/exp/$name" "$@"
}
R50=(--model resnet50 --batch 64)
GPT=(--model transformer --layers 4 --batch 8 --sequence 256 --positions 256 --optimizer adam --steps 6)
train r50_plain "${R50[@]}" --steps 6
# The sectioned run's budget: the first of these fractions of the plain arena whose plan (as
# `headroom train --backend cuda` makes it) both splits the step and offloads; the planner may
# prefer recomputing alone at some budgets. train plans for its --budget less the backend's
# fixed cost (context and handles), which the plain run reported, so that is added back.
# Each plan runs under what is left of the phase, less 30 s for the sectioned run itself.
SECTIONED=""
plan_seconds() { echo $(($(left) - 30)); }
if [ -n "$GPU" ] && [ "$(plan_seconds)" -lt 5 ]; then
  skip train:r50_sectioned "no time left in its phase to plan it"; GPU_PLAN=""
else GPU_PLAN=$GPU; fi
if [ -n "$GPU_PLAN" ]; then
  PLAN=("$H" plan "${R50[@]}" --backend cuda --json)
  arena() { timeout -k 2 "$(plan_seconds)" "${PLAN[@]}" 2>>"$R" | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["summary"]["arena_bytes"])' 2>>"$R"; }
  ARENA=$(arena)
  if [ -z "$ARENA" ]; then   # the cuda backend failed to plan: the h100 preset without its scratch
    PLAN=("$H" plan "${R50[@]}" --device h100 --json); ARENA=$(arena)
    note "WARN  headroom plan --backend cuda failed (see runs.log); the budget comes from --device h100"
  fi
  FIXED=$(tail -1 "$SCRATCH/runs/r50_plain.jsonl" 2>/dev/null | "$PY" -c 'import json,sys; print(int(json.load(sys.stdin).get("fixed_device_bytes", 0)))' 2>/dev/null)
  FIXED=${FIXED:-0}
  for pct in 60 70 50 40 80; do
    [ -n "$ARENA" ] && [ "$(plan_seconds)" -ge 5 ] || break
    budget=$((ARENA * pct / 100))
    plan=$(timeout -k 2 "$(plan_seconds)" "${PLAN[@]}" --host-memory separate --budget "$budget" 2>>"$R" |
      "$PY" -c 'import json,sys; d=json.load(sys.stdin); print(int(d["summary"]["offloaded_bytes"]), len(d["sections"]))' 2>>"$R")
    [ -n "$plan" ] || continue
    [ -z "$SECTIONED" ] && SECTIONED="$budget $pct $plan"
    set -- $plan
    if [ "$1" -gt 0 ] && [ "$2" -gt 1 ]; then SECTIONED="$budget $pct $plan"; break; fi
  done
  set --
fi
if [ -n "$SECTIONED" ]; then
  set -- $SECTIONED
  note "resnet50 sectioned: plan budget $1 B ($2% of the plain arena; planned $4 sections, $3 B offloaded) + fixed cost $FIXED B"
  train r50_sectioned "${R50[@]}" --steps 6 --host-memory separate --budget "$(($1 + FIXED))"
  set --
elif [ -n "$GPU_PLAN" ]; then skip train:r50_sectioned "headroom plan gave no usable budget (see runs.log)"
elif [ -z "$GPU" ]; then skip train:r50_sectioned "no GPU present"; fi
train gpt_a "${GPT[@]}"
train gpt_b "${GPT[@]}"
train r18_a --model resnet18 --batch 32 --steps 4
train r18_b --model resnet18 --batch 32 --steps 4

# ---- 4. The same models in this machine's PyTorch -----------------------------------------
TL=$OUT/torch.log
if [ -n "$GPU" ] && [ -z "$PY" ]; then skip torch:resnet50 "no python3"; skip torch:transformer "no python3"
else
  TORCH=(env LD_LIBRARY_PATH="$ORIG_LD_LIBRARY_PATH" "$PY" "$K/torch_step_time.py")
  step torch:resnet50 120 "$TL" "$SCRATCH/torch.jsonl" "${TORCH[@]}" --model resnet50 --batch 64
  step torch:transformer 120 "$TL" "$SCRATCH/torch.jsonl" "${TORCH[@]}" --model transformer \
    --layers 4 --batch 8 --sequence 256 --optimizer adam
fi

# ---- 5. CUPTI's account, and a job through headroomd --------------------------------------
PHASE_END=$((START + BUDGET * 88 / 100))
step profile:cupti 90 "$R" "$OUT/profile.json" "$H" profile --backend cuda --model resnet50 --batch 64 --steps 3 --json
# A headroomd on free loopback ports, one small job submitted and watched to its end.
daemon_job() {
  local state=$SCRATCH/state ready=$SCRATCH/ready pid addr rc
  "$B/headroomd" --backend cuda --listen 127.0.0.1:0 --metrics off --state "$state" \
    --ready-file "$ready" >>"$SCRATCH/headroomd.log" 2>&1 &
  pid=$!
  for _ in $(seq 60); do grep -qs '^grpc=' "$ready" && break; kill -0 $pid 2>/dev/null || break; sleep 1; done
  addr=$(sed -n 's/^grpc=//p' "$ready" 2>/dev/null)
  if [ -z "$addr" ]; then echo "headroomd did not become ready:"; cat "$SCRATCH/headroomd.log"; kill $pid 2>/dev/null; return 1; fi
  "$H" submit --server "$addr" --backend cuda --model mlp --batch 256 --steps 50 --name kit --watch; rc=$?
  kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null
  echo "--- headroomd's log"; cat "$SCRATCH/headroomd.log"
  return $rc
}
export B H SCRATCH; export -f daemon_job
step daemon:job 90 "$R" - bash -c daemon_job

# ---- 6. compute-sanitizer on short runs ---------------------------------------------------
PHASE_END=$DEADLINE
CS=$(command -v compute-sanitizer || true)
SL=$OUT/sanitizer.log
SHORT_CNN="--model mobilenet_v2 --image_size 32 --batch 2 --steps 1"
SHORT_GPT="--model transformer --layers 1 --d_model 64 --heads 2 --sequence 16 --positions 16 --vocab 100 --batch 2 --steps 2"
for tool in memcheck racecheck; do
  for m in cnn gpt; do
    if [ -n "$GPU" ] && [ -z "$CS" ]; then skip "sanitizer:$tool:$m" "compute-sanitizer not found"; continue; fi
    args=$SHORT_CNN; [ $m = gpt ] && args=$SHORT_GPT
    step "sanitizer:$tool:$m" 75 "$SL" - "$CS" --tool $tool --target-processes all --error-exitcode 86 --print-limit 20 \
      "$H" train --backend cuda $args
  done
done

# ---- The figures --------------------------------------------------------------------------
note "ran $(elapsed)s of ${BUDGET}s"
if [ -n "$PY" ]; then
  "$PY" "$K/figures.py" --scratch "$SCRATCH" --out "$OUT" --gpu "$GPU" --seconds "$(elapsed)" \
    --budget "$BUDGET" 2>>"$OUT/env.txt" | tee -a "$S"
  [ "${PIPESTATUS[0]}" -eq 0 ] || note "figures.py failed: see env.txt"
fi
if [ ! -s "$OUT/figures.json" ]; then   # no Python: the steps alone, by hand
  {
    printf '{"gpu": "%s", "seconds": %s, "note": "figures.py did not run", "steps": [' "${GPU:-}" "$(elapsed)"
    awk -F'\t' '{printf "%s{\"name\": \"%s\", \"status\": \"%s\"}", (NR>1?", ":""), $1, $2}' "$STEPS"
    printf ']}\n'
  } >"$OUT/figures.json"
fi
# Logs stay under the device tool's 16 MiB a file.
for f in "$OUT"/*.log; do
  [ -f "$f" ] && [ "$(stat -c %s "$f")" -gt 15000000 ] && { tail -c 15000000 "$f" >"$f.t" && mv "$f.t" "$f"; }
done
PASS=$(awk -F'\t' '$2=="pass"' "$STEPS" | wc -l)
FAIL=$(awk -F'\t' '$2=="fail"' "$STEPS" | wc -l)
SKIP=$(awk -F'\t' '$2=="skip"' "$STEPS" | wc -l)
WHERE="on $GPU"; [ -n "$GPU" ] || WHERE="(no GPU present)"
note "done in $(elapsed)s: $PASS passed, $FAIL failed, $SKIP skipped $WHERE"
rm -rf "$SCRATCH"
exit 0
