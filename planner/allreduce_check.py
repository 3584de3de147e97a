#!/usr/bin/env python3
"""Holds the cost model's "cpu" interconnect preset against MPI: measures one allreduce of
each size alone with dist/allreduce_bench under mpirun, prints the preset's prediction
(planner/ranks_bench --allreduce), the ratio predicted / measured, and the least-squares fit
of the ring model t = 2(N-1)/N * B / bandwidth + 2(N-1) * latency to the measurements.

  bazel build //dist:allreduce_bench //planner:ranks_bench
  python3 planner/allreduce_check.py [--ranks 2] [--steps 20] [BYTES...]
"""
import argparse
import json
import os
import subprocess
import sys


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ranks", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--bin", default="bazel-bin")
    parser.add_argument("--fit-max-bytes", type=int, default=1 << 22,
                        help="fit the sizes up to this (default 4 MiB: one gradient's bucket)")
    parser.add_argument("sizes", type=int, nargs="*",
                        default=[1 << 16, 1 << 18, 1 << 20, 1 << 22, 1 << 24, 1 << 26])
    args = parser.parse_args()
    if args.ranks < 2:
        sys.exit("--ranks must be at least 2")
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
               OMP_NUM_THREADS="1")
    predicted = {}
    out = subprocess.run([f"{args.bin}/planner/ranks_bench", "--allreduce", "cpu",
                          str(args.ranks)] + [str(s) for s in args.sizes],
                         check=True, capture_output=True, text=True).stdout
    for line in out.splitlines():
        row = json.loads(line)
        predicted[row["bytes"]] = row["predicted_seconds"]
    measured = {}
    for size in args.sizes:
        cmd = ["mpirun", "-np", str(args.ranks), "--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
        cmd += [f"{args.bin}/dist/allreduce_bench", str(size), str(size), str(args.steps)]
        run = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env)
        row = json.loads(run.stdout.strip().splitlines()[-1])
        measured[size] = row["median_step_seconds"]
    n = args.ranks
    print(f"{'BYTES':>10} {'MEASURED s':>12} {'PREDICTED s':>12} {'PRED/MEAS':>10}")
    for size in args.sizes:
        print(f"{size:>10} {measured[size]:>12.6f} {predicted[size]:>12.6f} "
              f"{predicted[size] / measured[size]:>10.2f}")
    # Least squares of t = x * a + b, x = 2(N-1)/N * B: a = 1 / bandwidth, b = 2(N-1) latency.
    fitted = [s for s in args.sizes if s <= args.fit_max_bytes]
    if len(fitted) < 2:
        sys.exit("--fit-max-bytes leaves fewer than 2 sizes to fit")
    xs = [2 * (n - 1) / n * s for s in fitted]
    ts = [measured[s] for s in fitted]
    k = len(xs)
    mx, mt = sum(xs) / k, sum(ts) / k
    sxx = sum((x - mx) ** 2 for x in xs)
    a = sum((x - mx) * (t - mt) for x, t in zip(xs, ts)) / sxx
    b = mt - a * mx
    print(f"fit of sizes <= {args.fit_max_bytes}: bandwidth {1 / a / 1e9:.3f} GB/s, latency {b / (2 * (n - 1)) * 1e6:.1f} us "
          f"a ring step (the preset: see planner/collective_cost.cc)")


if __name__ == "__main__":
    main()
