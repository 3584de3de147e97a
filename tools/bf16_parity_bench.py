#!/usr/bin/python3
"""Headroom's --precision bf16 against PyTorch 1.13 step by step: under Headroom's own policy
replayed with PyTorch's kernels (torch_reference.py --headroom-bf16) and under PyTorch's
autocast (--autocast-bf16), with both precisions' float32 runs beside them.

    /usr/bin/python3 tools/bf16_parity_bench.py [--headroom bazel-bin/clients/headroom]
        [--steps 8] [--threads 2] [--out DIR] -- MODEL FLAGS...

default model: --model transformer --layers 2 --d_model 64 --heads 4 --sequence 64
--vocab 512 --batch 4 --dropout_percent 0 (dropout off: PyTorch cannot draw Headroom's masks).

1. `headroom train MODEL --steps S --export DIR/fp32` and `... --precision bf16 --export
   DIR/bf16` (the same seed: the same initial weights and synthetic batches); and the same
   with --steps 1 (DIR/fp32_1, DIR/bf16_1) for the first update alone.
2. PyTorch trains the float32 export in float32 and the bf16 export's graph under each
   policy (torch_reference.Train: the same weights, batches and optimizer).
3. Prints every step's loss of each run and the relative differences |a - b| / |b| of
   Headroom bf16 against the PyTorch replay of its policy, against autocast, and against
   its own float32 run; then, after one step, the parameter updates:
   ||a - b|| / ||b - initial|| per parameter (median and max over parameters), which after
   one SGD step is the relative error of the first gradient. Headroom float32 against
   PyTorch float32 is the floor (reduction orders); PyTorch's bf16 policies against PyTorch
   float32 give bf16's own size.
Exit status 0 (a benchmark: it prints, it does not judge).
"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402

import torch_reference  # noqa: E402

DEFAULT_MODEL = ["--model", "transformer", "--layers", "2", "--d_model", "64", "--heads", "4",
                 "--sequence", "64", "--vocab", "512", "--batch", "4", "--dropout_percent", "0"]


def Export(headroom, model, precision, steps, directory):
    command = ([headroom, "train"] + model +
               ["--steps", str(steps), "--precision", precision, "--export", directory, "--json"])
    print("$ " + " ".join(command), flush=True)
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    export = torch_reference.Export.Load(directory)
    with open(os.path.join(directory, "headroom.json")) as f:
        import json
        results = json.load(f)
    entries = {e["name"]: e for e in results["final_state"]}
    return export, results["losses"], export.ReadState("final_state.bin", entries)


def TorchRun(export, policy):
    """Returns (losses, final state) of PyTorch training `export` under `policy`."""
    torch_reference.AUTOCAST_BF16 = policy == "autocast"
    torch_reference.HEADROOM_BF16 = policy == "headroom"
    try:
        interpreter = torch_reference.GraphInterpreter(export)
        losses, _, model = torch_reference.Train(export, interpreter, 0)
        return losses, {n: t.clone() for n, t in model.State().items()}
    finally:
        torch_reference.AUTOCAST_BF16 = torch_reference.HEADROOM_BF16 = False


def UpdateErrors(a, b, initial, parameters):
    """Returns (median, max, worst name) over `parameters` of ||a - b|| / ||b - initial||."""
    rel = {}
    for name in parameters:
        moved = (b[name].double() - initial[name].double()).norm().item()
        if moved > 0:
            rel[name] = (a[name].double() - b[name].double()).norm().item() / moved
    worst = max(rel, key=rel.get)
    return statistics.median(rel.values()), rel[worst], worst


def Main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    model = DEFAULT_MODEL
    if "--" in argv:
        model = argv[argv.index("--") + 1:]
        argv = argv[:argv.index("--")]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default="bazel-bin/clients/headroom")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", default="")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.use_deterministic_algorithms(True, warn_only=True)
    out = args.out or tempfile.mkdtemp(prefix="bf16_parity_")

    # 1-2. Every step's loss.
    fp32, h_fp32, _ = Export(args.headroom, model, "fp32", args.steps, os.path.join(out, "fp32"))
    bf16, h_bf16, _ = Export(args.headroom, model, "bf16", args.steps, os.path.join(out, "bf16"))
    t_fp32, _ = TorchRun(fp32, "fp32")
    t_policy, _ = TorchRun(bf16, "headroom")
    t_autocast, _ = TorchRun(bf16, "autocast")
    print("\n%s, %d steps, %s" % (" ".join(model), args.steps, fp32.optimizer.get("kind", "")))
    print("%4s %11s %11s %11s %11s %11s  %9s %9s %9s %9s" % (
        "step", "hr fp32", "torch fp32", "hr bf16", "torch hr", "autocast", "bf16/hr",
        "bf16/auto", "bf16/fp32", "fp32/fp32"))
    rows = []
    for s in range(args.steps):
        rel = lambda a, b: abs(a - b) / abs(b)
        row = (rel(h_bf16[s], t_policy[s]), rel(h_bf16[s], t_autocast[s]),
               rel(h_bf16[s], h_fp32[s]), rel(h_fp32[s], t_fp32[s]))
        rows.append(row)
        print("%4d %11.7f %11.7f %11.7f %11.7f %11.7f  %9.2e %9.2e %9.2e %9.2e" % (
            (s, h_fp32[s], t_fp32[s], h_bf16[s], t_policy[s], t_autocast[s]) + row))
    print("max  %s  %9.2e %9.2e %9.2e %9.2e" % (" " * 59, *[max(c) for c in zip(*rows)]))

    # 3. The first update.
    fp32_1, _, h_fp32_state = Export(args.headroom, model, "fp32", 1,
                                     os.path.join(out, "fp32_1"))
    bf16_1, _, h_bf16_state = Export(args.headroom, model, "bf16", 1,
                                     os.path.join(out, "bf16_1"))
    initial = fp32_1.ReadState()
    parameters = fp32_1.Names("parameter")
    _, t_fp32_state = TorchRun(fp32_1, "fp32")
    _, t_policy_state = TorchRun(bf16_1, "headroom")
    _, t_autocast_state = TorchRun(bf16_1, "autocast")
    print("\nfirst update, ||a - b|| / ||b - initial|| over the %d parameters:" % len(parameters))
    for a_name, a, b_name, b in (
            ("headroom bf16", h_bf16_state, "torch headroom policy", t_policy_state),
            ("headroom bf16", h_bf16_state, "torch autocast", t_autocast_state),
            ("torch headroom policy", t_policy_state, "torch autocast", t_autocast_state),
            ("torch headroom policy", t_policy_state, "torch fp32", t_fp32_state),
            ("torch autocast", t_autocast_state, "torch fp32", t_fp32_state),
            ("headroom bf16", h_bf16_state, "headroom fp32", h_fp32_state),
            ("headroom fp32", h_fp32_state, "torch fp32", t_fp32_state)):
        median, worst, name = UpdateErrors(a, b, initial, parameters)
        print("  %-22s vs %-22s median %.2e, max %.2e ('%s')" % (a_name, b_name, median, worst,
                                                                name))
    print("exports in " + out)
    return 0


if __name__ == "__main__":
    sys.exit(Main())
