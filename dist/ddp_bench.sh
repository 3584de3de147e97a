#!/usr/bin/env bash
# Data-parallel throughput on this host (docs/distributed.md): 1 process x 2 threads at the
# global batch against 2 ranks x 1 thread at half of it each, and how much of the
# allreduces the backward hides, for each bucket size given; the runs interleaved (for each
# round, for each bucket size: one process, then the ranks), medians over the rounds.
#
#   dist/ddp_bench.sh [STEPS] [BUCKET_KIB...]     (from the repository root, after
#                                                  bazel build //clients:headroom //dist:allreduce_bench)
# Environment: MODEL (default "--model resnet18"), BATCH (global, default 16), ROUNDS
# (default 2).
#
# Per step (medians over the steps, the mean of the ranks; dist/overlap.h): waited = the
# training thread's wait for the buckets; imbalance = the part of it before the last rank
# issued the bucket waited for; exposed = the rest (communication not hidden); in flight =
# the reductions' time between the last rank's issue and completion. alone = the same
# buckets reduced with nothing beside them (dist/allreduce_bench). Hidden shares:
# 1 - exposed / alone and 1 - exposed / in flight.
set -euo pipefail
STEPS="${1:-6}"
shift || true
BUCKETS=("$@")
[[ ${#BUCKETS[@]} -gt 0 ]] || BUCKETS=(0)
read -r -a MODEL <<<"${MODEL:---model resnet18}"
BATCH="${BATCH:-16}"
ROUNDS="${ROUNDS:-2}"
HEADROOM=bazel-bin/clients/headroom
BENCH=bazel-bin/dist/allreduce_bench
PY=/usr/bin/python3
if [[ "$(id -u)" == 0 ]]; then
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
fi
field() { tail -n 1 | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }
array() { tail -n 1 | sed -n "s/.*\"$1\":\[\([0-9,]*\)\].*/\1/p"; }
ROWS=$(mktemp)
trap 'rm -f "$ROWS"' EXIT

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg) on $(nproc) cores"
for round in $(seq 1 "$ROUNDS"); do
  for kib in "${BUCKETS[@]}"; do
    one=$(OMP_NUM_THREADS=2 "$HEADROOM" train "${MODEL[@]}" --batch "$BATCH" --steps "$STEPS" \
            --json | field median_step_seconds)
    two=$("$HEADROOM" train "${MODEL[@]}" --batch $((BATCH / 2)) --steps "$STEPS" --ranks 2 \
            --threads-per-rank 1 --bucket-kib "$kib" --json 2>/dev/null | tail -n 1)
    sizes=$(array bucket_sizes_bytes <<<"$two")
    alone=$(mpirun -np 2 --oversubscribe --bind-to none -x OMP_NUM_THREADS=1 "$BENCH" - \
              "$sizes," 10 | field median_step_seconds)
    echo "$round $kib $one $(field median_step_seconds <<<"$two") $(field buckets <<<"$two")" \
         "$(field allreduce_bytes <<<"$two") $(field steps <<<"$two") $alone" \
         "$(field allreduce_waited_seconds <<<"$two") $(field allreduce_imbalance_seconds <<<"$two")" \
         "$(field allreduce_exposed_communication_seconds <<<"$two")" \
         "$(field allreduce_communication_seconds <<<"$two") $(cut -d' ' -f1 /proc/loadavg)" |
      tee -a "$ROWS"
  done
done
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
"$PY" - "$ROWS" "$BATCH" "${MODEL[*]}" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1]) if l.strip()]
batch, model = int(sys.argv[2]), sys.argv[3]
print(f"{model}, global batch {batch}: medians over the rounds by bucket size (rows above: round, "
      "KiB, 1 process s, 2 ranks s, buckets, bytes, steps, alone, waited, imbalance, exposed, "
      "in flight, load)")
print("| buckets (KiB) | per step | MiB | 1 process x 2 threads | 2 ranks x 1 thread | ratio | "
      "alone | waited | imbalance | exposed | in flight | hidden (of alone) | hidden (of in flight) |")
print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
for kib in dict.fromkeys(r[1] for r in rows):
    rs = [r for r in rows if r[1] == kib]
    med = lambda i: statistics.median(float(r[i]) for r in rs)
    one, two, alone = med(2), med(3), med(7)
    waited, imb, exp, flight = med(8), med(9), med(10), med(11)
    per_step_mib = float(rs[0][5]) / float(rs[0][6]) / 2**20
    print(f"| {kib} | {rs[0][4]} | {per_step_mib:.1f} | {one:.3f} s | {two:.3f} s | "
          f"{one / two:.3f} | {alone:.3f} s | {waited:.3f} s | {imb:.3f} s | {exp:.4f} s | "
          f"{flight:.3f} s | {100 * max(0, 1 - exp / alone):.1f}% | "
          f"{100 * max(0, 1 - exp / flight) if flight > 0 else 100:.1f}% |")
PY
