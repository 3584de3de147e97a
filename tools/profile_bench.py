#!/usr/bin/python3
"""How far a profile moves the planner's predicted step time toward the measured one.

For each model: profile the plain step (no budget) for its measured node times; then, with
no budget and under a budget, compare the step time the plan predicts with the roofline cost
model and with the profile's measured costs (`--profile`) against the step time measured
running that plan. Prints a table with each prediction's error.

  /usr/bin/python3 tools/profile_bench.py [--headroom bazel-bin/clients/headroom] [--steps 4]

Needs only the built command line (bazel build //clients:headroom).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

MODELS = {
    "resnet18": ["--model", "resnet18", "--batch", "16"],
    "transformer": ["--model", "transformer", "--batch", "16", "--layers", "4",
                    "--d_model", "256", "--heads", "4", "--sequence", "128",
                    "--positions", "128", "--vocab", "8192"],
}


def run_json(cmd):
    out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def profile(headroom, model, steps, extra):
    return run_json([headroom, "profile", *MODELS[model], "--steps", str(steps), "--json", *extra])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default="bazel-bin/clients/headroom")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--budget_fraction", type=float, default=0.8,
                        help="budget as a fraction of the plain step's peak (default 0.8)")
    parser.add_argument("--models", default="resnet18,transformer")
    args = parser.parse_args()
    tmp = tempfile.mkdtemp(prefix="headroom-profile-bench-")
    print(f"predicted against measured step time, CPU backend, medians of steps 2..{args.steps}")
    print(f"{'model':12} {'plan':28} {'roofline':>9} {'err':>7} {'profiled':>9} {'err':>7}"
          f" {'measured':>9}")
    for model in args.models.split(","):
        prof_path = os.path.join(tmp, f"{model}.json")
        base = profile(args.headroom, model, args.steps, ["--out", prof_path])
        peak = int(base["plan"]["predicted_peak_bytes"])
        budget = int(peak * args.budget_fraction)
        rows = []
        # No budget: one plan, predicted both ways, measured by the profile itself.
        again = profile(args.headroom, model, args.steps, ["--profile", prof_path])
        rows.append(("plain step", base["predicted_step_seconds"],
                     again["predicted_step_seconds"], again["median_step_seconds"]))
        # Under a budget: each cost model picks its plan; each plan is run and measured. The
        # roofline's plan is also predicted by the measured model with the same cuts (plan
        # --profile of a plan is not asked for here: the rows say which model chose).
        roof = profile(args.headroom, model, args.steps, ["--budget", str(budget)])
        meas = profile(args.headroom, model, args.steps, ["--budget", str(budget),
                                                          "--profile", prof_path])
        rows.append((f"{args.budget_fraction:.0%} budget, roofline's plan",
                     roof["predicted_step_seconds"], None, roof["median_step_seconds"]))
        rows.append((f"{args.budget_fraction:.0%} budget, profile's plan", None,
                     meas["predicted_step_seconds"], meas["median_step_seconds"]))
        for name, roofline, profiled, measured in rows:
            def cell(p):
                if p is None:
                    return f"{'-':>9} {'':>7}"
                return f"{p:9.3f} {100 * (p / measured - 1):+6.1f}%"
            print(f"{model:12} {name:28} {cell(roofline)} {cell(profiled)} {measured:9.3f}")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
