#!/usr/bin/python3
"""Compares two `headroom train --export DIR` results: every step's loss and every final
parameter and buffer, each within a relative tolerance.

  compare_runs.py DIR_A DIR_B [--rtol 1e-5]

A loss passes when |a - b| <= rtol * |b|; a tensor when max|a - b| <= rtol * max|b| (its
largest element sets its scale, so a tensor's elements near zero do not fail on rounding).
Prints the worst of each and exits 1 naming the first step or tensor beyond the tolerance.
"""
import argparse
import json
import sys

import numpy as np


def load(d):
    with open(f"{d}/headroom.json") as f:
        meta = json.load(f)
    with open(f"{d}/final_state.bin", "rb") as f:
        blob = f.read()
    tensors = {}
    for t in meta["final_state"]:
        raw = blob[t["offset_bytes"]:t["offset_bytes"] + t["bytes"]]
        tensors[t["name"]] = np.frombuffer(raw, dtype=np.float32).astype(np.float64)
    return meta["losses"], tensors


def main():
    p = argparse.ArgumentParser()
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--rtol", type=float, default=1e-5)
    args = p.parse_args()
    losses_a, state_a = load(args.a)
    losses_b, state_b = load(args.b)
    failures = []
    if len(losses_a) != len(losses_b):
        failures.append(f"{len(losses_a)} losses against {len(losses_b)}")
    worst_loss = 0.0
    for step, (a, b) in enumerate(zip(losses_a, losses_b)):
        rel = abs(a - b) / max(abs(b), 1e-30)
        worst_loss = max(worst_loss, rel)
        if rel > args.rtol:
            failures.append(f"step {step}: loss {a!r} against {b!r} ({rel:.2e} relative)")
    if set(state_a) != set(state_b):
        failures.append(f"tensors differ: {sorted(set(state_a) ^ set(state_b))}")
    worst_tensor, worst_name = 0.0, ""
    for name in sorted(set(state_a) & set(state_b)):
        a, b = state_a[name], state_b[name]
        scale = max(np.max(np.abs(b)), 1e-30)
        rel = float(np.max(np.abs(a - b)) / scale)
        if rel > worst_tensor:
            worst_tensor, worst_name = rel, name
        if rel > args.rtol:
            failures.append(f"tensor '{name}': max difference {rel:.2e} of its scale")
    print(f"{len(losses_a)} losses: worst {worst_loss:.2e} relative; {len(state_a)} tensors: "
          f"worst {worst_tensor:.2e} ('{worst_name}'); tolerance {args.rtol:g}")
    if failures:
        print("FAIL: " + "; ".join(failures[:5]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
