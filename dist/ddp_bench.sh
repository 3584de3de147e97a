#!/usr/bin/env bash
# Data-parallel throughput on this host (docs/distributed.md): 1 process x 2 threads at the
# global batch against 2 ranks x 1 thread at half of it each, and the share of the
# allreduce time hidden behind the backward, for each bucket size given.
#
#   dist/ddp_bench.sh [STEPS] [BUCKET_KIB...]     (from the repository root, after
#                                                  bazel build //clients:headroom //dist:allreduce_bench)
# Environment: MODEL (default "--model resnet18"), BATCH (global, default 16).
#
# hidden share = 1 - (the training thread's wait for allreduces per step) / (the same
# allreduces per step alone, dist/allreduce_bench, with nothing beside them).
set -euo pipefail
STEPS="${1:-6}"
shift || true
BUCKETS=("$@")
[[ ${#BUCKETS[@]} -gt 0 ]] || BUCKETS=(4096)
read -r -a MODEL <<<"${MODEL:---model resnet18}"
BATCH="${BATCH:-16}"
HEADROOM=bazel-bin/clients/headroom
BENCH=bazel-bin/dist/allreduce_bench
PY=/usr/bin/python3
if [[ "$(id -u)" == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
field() { tail -n 1 | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
one=$(OMP_NUM_THREADS=2 "$HEADROOM" train "${MODEL[@]}" --batch "$BATCH" --steps "$STEPS" --json)
one_step=$(field median_step_seconds <<<"$one")
echo "1 process x 2 threads, batch $BATCH: median step $one_step s"
for kib in "${BUCKETS[@]}"; do
  two=$("$HEADROOM" train "${MODEL[@]}" --batch $((BATCH / 2)) --steps "$STEPS" --ranks 2 \
          --threads-per-rank 1 --bucket-kib "$kib" --json 2>/dev/null)
  two_step=$(field median_step_seconds <<<"$two")
  exposed=$(field allreduce_exposed_seconds <<<"$two")
  bytes=$(field allreduce_bytes <<<"$two")
  buckets=$(field buckets <<<"$two")
  steps=$(field steps <<<"$two")
  per_step=$((bytes / steps))
  alone=$(mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$BENCH" \
            "$per_step" "$((kib > 0 ? kib * 1024 : per_step / buckets))" 10 |
          field median_step_seconds)
  "$PY" - "$one_step" "$two_step" "$exposed" "$steps" "$alone" "$kib" "$buckets" "$per_step" "$BATCH" <<'PY'
import sys
one, two, exposed, steps, alone = map(float, sys.argv[1:6])
kib, buckets, per_step, batch = sys.argv[6], sys.argv[7], int(sys.argv[8]), int(sys.argv[9])
wait = exposed / steps
print(f"2 ranks x 1 thread, batch {batch // 2} each, buckets of {kib} KiB ({buckets} per step, "
      f"{per_step / 2**20:.1f} MiB): median step {two:.3f} s; throughput ratio "
      f"(2 ranks / 1 process) {one / two:.3f}; allreduce alone {alone:.3f} s/step, waited "
      f"{wait:.3f} s/step: hidden {100 * max(0.0, 1 - wait / alone):.1f}%")
PY
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
