#!/usr/bin/env bash
# Data-parallel training end to end through mpirun (docs/distributed.md), 2 ranks:
#  1. equivalence: 2 ranks at batch B against 1 process at batch 2B, same seed: every step's
#     loss and every final parameter within 1e-5 relative (dist/compare_runs.py), for mlp and
#     a transformer without dropout, with 4 MiB buckets and with one per gradient, and with
#     sections (a re-forward issues no collective: exactly buckets x steps allreduces); the
#     ranks' parameters bitwise equal after 20 steps (the run's own final check, and both
#     runs' checksums equal whatever the plan); and the 2 ranks' run against PyTorch at the
#     global batch (tools/torch_reference.py on the exported global batches); every rank's
#     measured arena peak equals its plan's, the gradient buckets being tensors of the plan;
#     with --dataset, rank 0's checkpoint resumed on both ranks ends bitwise where an
#     uninterrupted run does;
#     ranks seeded differently receive rank 0's state and end bitwise equal;
#     --sync-batchnorm: small_cnn (20 steps) and resnet18 at 32x32 (3 steps: beyond them a
#     2e-7 perturbation of the learning rate alone moves one process by more than 1e-5;
#     docs/distributed.md) within 1e-5 of one process at the global batch, with and without
#     sections, and exactly 3 batch-norm allreduces per batch norm and step (2 in the
#     forward, 1 in the backward; none in a re-forward);
#  2. a deliberate mismatch (different bucket sizes on the two ranks; --sync-batchnorm on one
#     rank only) stops both within 10 s, naming the ranks and the first differing collective;
#  3. a rank killed mid-run (SIGKILL) ends the job within 30 s, naming rank 1;
#  4. a rank that hangs (SIGSTOP) makes the other fail its collective's deadline
#     (--collective-timeout 5), naming the collective, and the job ends within 30 s.
set -euo pipefail

HEADROOM="$TEST_SRCDIR/headroom/clients/headroom"
COMPARE="$TEST_SRCDIR/headroom/dist/compare_runs.py"
PYTHON=/usr/bin/python3
MPIRUN=(mpirun --oversubscribe --bind-to none -x OMP_NUM_THREADS=1)
if [[ "$(id -u)" == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
command -v mpirun >/dev/null || { echo "FAIL: no mpirun; install openmpi-bin" >&2; exit 1; }

# Prints the "key": value of the summary (last) JSON line of stdin.
json_field() { tail -n 1 | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }

now() { date +%s.%N; }
elapsed() { "$PYTHON" -c "import sys; print(f'{float(sys.argv[2]) - float(sys.argv[1]):.2f}')" "$1" "$(now)"; }
below() { "$PYTHON" -c "import sys; sys.exit(0 if float(sys.argv[1]) < float(sys.argv[2]) else 1)" "$1" "$2"; }

# equivalent NAME BATCH STEPS [FLAGS...]: 2 ranks at BATCH against 1 process at 2 x BATCH.
equivalent() {
  local name="$1" batch="$2" steps="$3"
  shift 3
  local one="$TEST_TMPDIR/$name.one" two="$TEST_TMPDIR/$name.two"
  echo "== $name: 1 process at batch $((2 * batch)) against 2 ranks at batch $batch"
  local single ranked
  single=$("$HEADROOM" train "$@" --batch $((2 * batch)) --steps "$steps" --export "$one" --json)
  ranked=$("$HEADROOM" train "$@" --batch "$batch" --steps "$steps" --ranks 2 --export "$two" \
             --json --check-every 5)
  "$PYTHON" "$COMPARE" "$two" "$one" --rtol 1e-5
  local buckets allreduces
  buckets=$(json_field buckets <<<"$ranked")
  allreduces=$(json_field allreduces <<<"$ranked")
  echo "$buckets bucket(s), $allreduces allreduce(s) in $steps steps"
  if [[ "$allreduces" != "$((buckets * steps))" ]]; then
    echo "FAIL: $name: $allreduces allreduces in $steps steps of $buckets bucket(s)" >&2
    exit 1
  fi
  # Predicted is measured on every rank, the gradient buckets being tensors of its plan.
  "$PYTHON" - "$ranked" <<'PY'
import json, sys
s = json.loads(sys.argv[1].strip().splitlines()[-1])
m, p = s["rank_measured_peak_bytes"], s["rank_predicted_peak_bytes"]
print(f"arena peak by rank: measured {m}, predicted with the buckets {p}")
if len(m) != 2 or m != p:
    sys.exit(f"FAIL: the ranks' measured arena peaks {m} are not their plans' {p}")
PY
  CHECKSUM=$(json_field parameter_checksum <<<"$ranked")
  RANKED="$ranked"
}

# sync_equivalent NAME BATCH STEPS BN_PER_STEP [FLAGS...]: `equivalent` with --sync-batchnorm,
# and exactly BN_PER_STEP batch-norm allreduces per step, with and without 3 sections, which
# end at the same parameters.
sync_equivalent() {
  local name="$1" batch="$2" steps="$3" per_step="$4"
  shift 4
  local plain_checksum="" bn
  for sections in 1 3; do
    equivalent "${name}_sync_s$sections" "$batch" "$steps" "$@" --sync-batchnorm \
      --sections "$sections"
    bn=$(json_field batch_norm_allreduces <<<"$RANKED")
    echo "$bn batch-norm allreduce(s) in $steps steps"
    if [[ "$bn" != "$((per_step * steps))" ]]; then
      echo "FAIL: $name: $bn batch-norm allreduces in $steps steps, not $per_step per step" >&2
      exit 1
    fi
    if [[ -n "$plain_checksum" && "$CHECKSUM" != "$plain_checksum" ]]; then
      echo "FAIL: $name: with sections the ranks end at $CHECKSUM, without at $plain_checksum" >&2
      exit 1
    fi
    plain_checksum="$CHECKSUM"
  done
}

equivalent mlp 8 20 --model mlp --bucket-kib 4096
equivalent mlp_per_gradient 8 20 --model mlp --bucket-kib 0
# The independent instrument: PyTorch 1.13 trains the exported global batches at batch 16.
"$PYTHON" "$TEST_SRCDIR/headroom/tools/torch_reference.py" "$TEST_TMPDIR/mlp_per_gradient.two" \
  --threads 2 --no-memory
TRANSFORMER=(--model transformer --layers 2 --d_model 64 --heads 4 --sequence 32 --vocab 100
             --positions 32 --dropout_percent 0)
equivalent transformer 2 20 "${TRANSFORMER[@]}" --bucket-kib 4096
plain="$CHECKSUM"
equivalent transformer_sections 2 20 "${TRANSFORMER[@]}" --sections 3 --bucket-kib 0
if [[ "$CHECKSUM" != "$plain" ]]; then
  echo "FAIL: with sections the ranks end at checksum $CHECKSUM, without at $plain" >&2
  exit 1
fi

# Batch norm over the global batch: 2 (small_cnn) and 20 (resnet18) batch norms, each with
# a forward's 2 allreduces and a backward's 1.
sync_equivalent small_cnn 8 20 6 --model small_cnn --bucket-kib 0
sync_equivalent resnet18 16 3 60 --model resnet18 --image_size 32 --bucket-kib 4096

echo "== --dataset: rank 0's checkpoint after epoch 1, resumed on both ranks"
DATA=(--dataset fashion-mnist --model small_cnn --batch 32 --validation-fraction 0.95
      --eval-every 0 --progress-seconds 0 --json)
whole=$("$HEADROOM" train "${DATA[@]}" --ranks 2 --epochs 2 | json_field parameter_checksum)
"$HEADROOM" train "${DATA[@]}" --ranks 2 --epochs 1 --checkpoint-dir "$TEST_TMPDIR/ck" >/dev/null
resumed=$("$HEADROOM" train "${DATA[@]}" --ranks 2 --epochs 2 --resume "$TEST_TMPDIR/ck" |
          json_field parameter_checksum)
echo "uninterrupted $whole, resumed $resumed"
[[ -n "$whole" && "$whole" == "$resumed" ]] ||
  { echo "FAIL: the resumed ranks end at $resumed, the uninterrupted run at $whole" >&2; exit 1; }

echo "== ranks seeded differently: rank 0's state is broadcast, and they end bitwise equal"
timeout 60 "${MPIRUN[@]}" -np 1 "$HEADROOM" train --model mlp --batch 8 --steps 3 --seed 1 \
  : -np 1 "$HEADROOM" train --model mlp --batch 8 --steps 3 --seed 2 | grep "^ranks:" ||
  { echo "FAIL: the differently seeded ranks did not end in agreement" >&2; exit 1; }

# mismatch RANK0_ARGS -- RANK1_ARGS: the two ranks' command lines differ in the collectives
# they would issue; both must stop with an error naming the mismatch within 10 s. Sets $out.
mismatch() {
  local rank0=() rank1=()
  while [[ "$1" != "--" ]]; do rank0+=("$1"); shift; done
  shift
  rank1=("$@")
  local start took rc
  start=$(now)
  set +e
  out=$(timeout 60 "${MPIRUN[@]}" -np 1 "$HEADROOM" train "${rank0[@]}" \
          : -np 1 "$HEADROOM" train "${rank1[@]}" 2>&1)
  rc=$?
  set -e
  took=$(elapsed "$start")
  echo "$out" | grep "headroom train" || true
  echo "exit $rc after $took s"
  [[ "$rc" != 0 && "$rc" != 124 ]] || { echo "FAIL: the mismatched run exited $rc" >&2; exit 1; }
  below "$took" 10 || { echo "FAIL: the mismatch took $took s to stop (limit 10 s)" >&2; exit 1; }
  for rank in 0 1; do
    grep -q "rank $rank of 2: the ranks would issue different collectives each step.*rank(s) 1 differ from rank 0.*the first difference: collective #0" <<<"$out" ||
      { echo "FAIL: rank $rank did not name the mismatch" >&2; exit 1; }
  done
}

echo "== a collective mismatch: bucket sizes 0 and 1 GiB on ranks 0 and 1"
mismatch --model mlp --batch 8 --steps 3 --bucket-kib 0 \
  -- --model mlp --batch 8 --steps 3 --bucket-kib 1048576

echo "== a collective mismatch: --sync-batchnorm on rank 0 only"
mismatch --model small_cnn --batch 8 --steps 3 --sync-batchnorm \
  -- --model small_cnn --batch 8 --steps 3
grep -q "rank 0 of 2: .*allreduce of batch norm 'bn1' count and sum(x) (forward)" <<<"$out" ||
  { echo "FAIL: rank 0 did not name its batch-norm allreduce" >&2; exit 1; }

# run_and_signal SIGNAL TIMEOUT: starts 2 ranks of a long run, sends SIGNAL to rank 1 once
# both train, and prints the job's output; sets TOOK (seconds from the signal to the job's
# end) and RC.
run_and_signal() {
  local signal="$1" timeout="$2" log="$TEST_TMPDIR/signal.log"
  "${MPIRUN[@]}" -np 2 "$HEADROOM" train --model mlp --batch 8 --steps 100000 \
    --collective-timeout "$timeout" >"$log" 2>&1 &
  local job=$! rank1="" child
  for _ in $(seq 1 300); do
    grep -q "1/100000" "$log" 2>/dev/null && break
    sleep 0.1
  done
  for child in $(ps -o pid= --ppid "$job"); do
    if tr '\0' '\n' <"/proc/$child/environ" 2>/dev/null | grep -q '^OMPI_COMM_WORLD_RANK=1$'; then
      rank1=$child
    fi
  done
  [[ -n "$rank1" ]] || { kill "$job"; echo "FAIL: rank 1 not found" >&2; exit 1; }
  local start
  start=$(now)
  kill "-$signal" "$rank1"
  set +e
  for _ in $(seq 1 600); do
    kill -0 "$job" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$job" 2>/dev/null; then
    kill -KILL "$rank1" 2>/dev/null
    kill "$job"
  fi
  wait "$job"
  RC=$?
  set -e
  TOOK=$(elapsed "$start")
  grep -v '^\[' "$log" || true
}

echo "== rank 1 killed mid-run"
run_and_signal KILL 20
echo "exit $RC after $TOOK s"
[[ "$RC" != 0 ]] || { echo "FAIL: the job exited 0" >&2; exit 1; }
below "$TOOK" 30 || { echo "FAIL: the job took $TOOK s to end (limit 30 s)" >&2; exit 1; }
grep -q "rank 1 .*exited on signal 9" "$TEST_TMPDIR/signal.log" ||
  { echo "FAIL: nothing names rank 1" >&2; exit 1; }

echo "== rank 1 hangs (SIGSTOP): rank 0's collective misses its 5 s deadline"
run_and_signal STOP 5
echo "exit $RC after $TOOK s"
[[ "$RC" != 0 ]] || { echo "FAIL: the job exited 0" >&2; exit 1; }
below "$TOOK" 30 || { echo "FAIL: the job took $TOOK s to end (limit 30 s)" >&2; exit 1; }
grep -q "rank 0 of 2: .*did not complete within 5.0 s: a peer rank died or issued" \
  "$TEST_TMPDIR/signal.log" || { echo "FAIL: rank 0 did not name its late collective" >&2; exit 1; }
echo PASS
