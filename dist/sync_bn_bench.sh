#!/usr/bin/env bash
# --sync-batchnorm on this host (docs/distributed.md): 2 ranks x 1 thread at batch B with and
# without it against 1 process at batch 2B, same seed: the worst loss and parameter
# differences (dist/compare_runs.py), beside the same measure for one process whose learning
# rate is perturbed by 2e-7 relative (what rounding alone does to this model: the floor no
# implementation can beat), and the median step time of the ranks with and without it.
#
#   dist/sync_bn_bench.sh [STEPS]       (from the repository root, after
#                                        bazel build //clients:headroom)
# Environment: MODEL (default "--model resnet18 --image_size 32"), BATCH (per rank, default 16),
# LR (default 0.01), ROUNDS (pairs of timed runs without and with, default 3).
set -euo pipefail
STEPS="${1:-10}"
read -r -a MODEL <<<"${MODEL:---model resnet18 --image_size 32}"
BATCH="${BATCH:-16}"
LR="${LR:-0.01}"
ROUNDS="${ROUNDS:-3}"
HEADROOM=bazel-bin/clients/headroom
PY=/usr/bin/python3
if [[ "$(id -u)" == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT
field() { tail -n 1 | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
echo "${MODEL[*]}, $STEPS steps, lr $LR: 2 ranks x batch $BATCH against 1 process x batch $((2 * BATCH))"
OMP_NUM_THREADS=2 "$HEADROOM" train "${MODEL[@]}" --batch $((2 * BATCH)) --steps "$STEPS" \
  --lr "$LR" --export "$OUT/one" --json >/dev/null
perturbed=$("$PY" -c "import sys; print(repr(float(sys.argv[1]) * (1 + 2e-7)))" "$LR")
OMP_NUM_THREADS=2 "$HEADROOM" train "${MODEL[@]}" --batch $((2 * BATCH)) --steps "$STEPS" \
  --lr "$perturbed" --export "$OUT/perturbed" --json >/dev/null
echo -n "floor: 1 process, lr $perturbed against $LR: "
"$PY" dist/compare_runs.py "$OUT/perturbed" "$OUT/one" 2>/dev/null || true
# ROUNDS pairs of runs, without and with, one after the other: the machine's load changes.
for round in $(seq 1 "$ROUNDS"); do
  for sync in "" --sync-batchnorm; do
    name="${sync:-without --sync-batchnorm}"
    two=$("$HEADROOM" train "${MODEL[@]}" --batch "$BATCH" --steps "$STEPS" --lr "$LR" \
            --ranks 2 --threads-per-rank 1 $sync --export "$OUT/two$sync" --json 2>/dev/null)
    step=$(field median_step_seconds <<<"$two")
    bn=$(field batch_norm_allreduce_seconds <<<"$two")
    bn_count=$(field batch_norm_allreduces <<<"$two")
    printf "round %d, 2 ranks %s: median step %.3f s" "$round" "$name" "$step"
    if [[ -n "$bn" ]]; then
      "$PY" -c "import sys; s = int(sys.argv[3]); print(f', {int(sys.argv[1]) // s} batch-norm allreduces per step waited on {float(sys.argv[2]) / s:.4f} s a step (mean; with the wait for the slower rank and for bucket allreduces queued before them)', end='')" \
        "$bn_count" "$bn" "$STEPS"
    fi
    echo
    if [[ "$round" == 1 ]]; then
      echo -n "  against 1 process: "
      "$PY" dist/compare_runs.py "$OUT/two$sync" "$OUT/one" 2>/dev/null || true
    fi
    eval "step_${sync:+sync}=$step"
  done
  "$PY" -c "import sys; print(f'round {sys.argv[3]}: step time with --sync-batchnorm / without: {float(sys.argv[2]) / float(sys.argv[1]):.3f}')" \
    "$step_" "$step_sync" "$round"
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
