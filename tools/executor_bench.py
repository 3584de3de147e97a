#!/usr/bin/python3
"""Headroom's executor against PyTorch on this machine's CPU (issue 5's targets).

For each model: train it with `headroom train` unconstrained and under a budget of 30% of
its own unconstrained peak, then train the same graph from the same initial weights on the
same batches with PyTorch (tools/torch_reference.py), and print the median step times, the
peaks and the ratios the targets are stated in:

  time ratio        ours unconstrained / PyTorch            (target <= 1.0)
  budget ratio      ours at 30% budget / ours unconstrained (target <= 1.35)
  peak ratio        our measured arena peak / PyTorch's peak (target <= 0.7)

The peak ratio sets our arena against PyTorch's allocator; neither is the process's memory.
tools/physical_bench.py compares what the operating system counts (docs/memory.md).

Run with Debian's /usr/bin/python3 after building //clients:headroom (./headroom bench does
both). Each run's first step is a warm-up and is left out of the medians.
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLI = os.path.join(ROOT, "bazel-bin", "clients", "headroom")
REFERENCE = os.path.join(ROOT, "tools", "torch_reference.py")

MODELS = {
    "resnet18": ["--model", "resnet18", "--batch", "16"],
    "resnet50": ["--model", "resnet50", "--batch", "16"],
    "transformer": ["--model", "transformer", "--batch", "16", "--layers", "4",
                    "--d_model", "256", "--heads", "4", "--sequence", "128",
                    "--positions", "128", "--vocab", "8192"],
}


def mib(b):
    return b / 2**20


def train(model_args, steps, extra, export=None):
    cmd = [CLI, "train", *model_args, "--steps", str(steps), "--json", *extra]
    if export:
        cmd += ["--export", export]
    print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        return None, proc.stderr.strip()
    lines = [json.loads(l) for l in proc.stdout.splitlines() if l.strip()]
    summary = lines[-1]
    times = [l["step_seconds"] for l in lines[:-1]][1:]  # Drop the warm-up step.
    summary["median_step_seconds"] = statistics.median(times)
    return summary, None


def torch_reference(export, threads):
    out = os.path.join(export, "torch.json")
    cmd = ["/usr/bin/python3", REFERENCE, export, "--threads", str(threads), "--json", out]
    print("$", " ".join(cmd[1:]), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if not os.path.exists(out):
        return None, (proc.stderr or proc.stdout).strip()[-2000:]
    with open(out) as f:
        result = json.load(f)
    times = result["step_seconds"][1:]
    result["median_step_seconds"] = statistics.median(times)
    result["exit_code"] = proc.returncode
    return result, None


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--steps", type=int, default=6, help="steps per run (first is warm-up)")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--budget-fraction", type=float, default=0.3)
    args = parser.parse_args()
    if not os.path.exists(CLI):
        sys.exit(f"{CLI} is missing: run `bazel build -c opt //clients:headroom` first")

    rows = []
    for name in args.models.split(","):
        model_args = MODELS[name]
        with tempfile.TemporaryDirectory(prefix=f"headroom-bench-{name}-") as export:
            ours, error = train(model_args, args.steps, [], export)
            if ours is None:
                print(f"{name}: headroom train failed: {error}", file=sys.stderr)
                continue
            budget = int(ours["predicted_peak_bytes"] * args.budget_fraction)
            tight, tight_error = train(model_args, args.steps, ["--budget", str(budget)])
            if tight is None:
                # Below the smallest feasible peak: measure at that smallest peak instead.
                match = re.search(r"smallest peak .*?\((\d+) bytes\)", tight_error or "")
                if match:
                    tight_error = f"{args.budget_fraction:.0%} is infeasible: {tight_error}"
                    budget = int(match.group(1))
                    tight, _ = train(model_args, args.steps, ["--budget", str(budget)])
            ref, ref_error = torch_reference(export, args.threads)
            # The same step in 70% of PyTorch's peak memory: the plan that fits, and its time.
            seventy = None
            if ref:
                seventy, _ = train(model_args, args.steps,
                                   ["--budget", str(int(0.7 * ref["peak_bytes"]))])
        rows.append((name, ours, budget, tight, tight_error, ref, ref_error, seventy))

    print()
    print(f"CPU, {args.threads} threads, {args.steps} steps per run (first left out), "
          f"medians; budget = {args.budget_fraction:.0%} of our unconstrained peak")
    header = ("model", "ours s", "torch s", "ratio", "budget s", "ratio", "our peak MiB",
              "budget MiB", "budget/peak", "torch peak MiB", "ratio", "loss match")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for name, ours, budget, tight, tight_error, ref, ref_error, seventy in rows:
        o = ours["median_step_seconds"]
        t = ref["median_step_seconds"] if ref else float("nan")
        b = tight["median_step_seconds"] if tight else float("nan")
        tp = ref["peak_bytes"] if ref else float("nan")
        match = "n/a"
        if ref and "comparison" in ref:
            match = ("yes" if ref["comparison"].get("ok") else "NO") + \
                f" (max |dloss| {(ref['comparison'].get('max_loss_abs_diff') or float('nan')):.2e})"
        cells = (name, f"{o:.3f}", f"{t:.3f}", f"{o / t:.2f}",
                 f"{b:.3f}" if tight else "infeasible", f"{b / o:.2f}" if tight else "-",
                 f"{mib(ours['measured_peak_bytes']):.1f}", f"{mib(budget):.1f}",
                 f"{budget / ours['predicted_peak_bytes']:.2f}",
                 f"{mib(tp):.1f}", f"{ours['measured_peak_bytes'] / tp:.2f}", match)
        print("| " + " | ".join(cells) + " |")
        if seventy:
            print(f"  {name} in 70% of PyTorch's peak: measured peak "
                  f"{mib(seventy['measured_peak_bytes']):.1f} MiB "
                  f"({seventy['measured_peak_bytes'] / ref['peak_bytes']:.2f} of PyTorch's), "
                  f"{seventy['num_sections']} sections, median step "
                  f"{seventy['median_step_seconds']:.3f} s "
                  f"({seventy['median_step_seconds'] / ref['median_step_seconds']:.2f} of "
                  f"PyTorch's, {seventy['median_step_seconds'] / o:.2f} of ours unconstrained)")
        elif ref:
            print(f"  {name}: no plan fits 70% of PyTorch's peak")
        if ref and "comparison" in ref:
            diffs = ref["comparison"].get("loss_abs_diffs") or []
            print(f"  {name} |loss - PyTorch's| by step: " + " ".join(f"{d:.1e}" for d in diffs))
        if tight_error:
            print(f"  {name} at budget: {tight_error[:300]}")
        if ref_error:
            print(f"  {name} PyTorch: {ref_error}")


if __name__ == "__main__":
    main()
