#!/usr/bin/python3
"""bf16 mixed precision's loss band on real data: Headroom's --precision bf16 against its
float32, and both against PyTorch 1.13 (float32, torch.autocast's CPU bf16, and Headroom's
bf16 policy replayed with PyTorch's kernels) on the same Fashion-MNIST batches.

    /usr/bin/python3 tools/bf16_band_bench.py [--headroom bazel-bin/clients/headroom]
        [--model mlp|small_cnn] [--batch 128] [--epochs 1] [--lr 0.05] [--window 25]
        [--threads 2] [--out DIR] [--skip-torch]

1. `headroom train --dataset fashion-mnist --model M --batch B --epochs E --lr LR --export
   DIR/fp32 --json` and the same with `--precision bf16` (DIR/bf16): the same seed, so the
   same initial weights (a bf16 run starts from the float32 run's) and the same order of
   items; each export's headroom.json holds every step's loss, the --json summary the final
   test accuracy (10,000 images).
2. PyTorch (tools/fashion_mnist_bench.py's TrainTorch over the float32 export: the same
   graph, weights, order and rates) in three policies: fp32, autocast (torch.autocast("cpu",
   torch.bfloat16)) and headroom (torch_reference.py --headroom-bf16).
3. The band: each curve smoothed by a trailing mean over `--window` steps; for a pair (a, b)
   the largest |a - b| / b of the smoothed losses over the steps from `--window` on, and the
   mean of the same over those steps. Printed for bf16 against float32 within each
   implementation, and across implementations at the same precision (Headroom fp32 against
   PyTorch fp32 is the floor: two float32 runs part by their reduction orders alone), with
   the ratio of each band to that floor.

mlp: 784 inputs (the images flattened), 3 hidden layers of 256, 10 classes (narrower than
the zoo's 1024: Debian's PyTorch multiplies float32 matrices with the reference BLAS).
Timings are of this machine as it is.
"""

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist_bench  # noqa: E402

MODEL_FLAGS = {
    "mlp": ["--model", "mlp", "--input", "784", "--classes", "10", "--width", "256"],
    "small_cnn": ["--model", "small_cnn"],
}


def Smoothed(losses, window):
    """Returns the trailing mean over `window` steps of `losses` from step window - 1 on."""
    out, total = [], 0.0
    for i, x in enumerate(losses):
        total += x
        if i >= window:
            total -= losses[i - window]
        if i >= window - 1:
            out.append(total / window)
    return out


def Band(a, b, window):
    """Returns {"max", "mean", "at_step"}: |smoothed a - smoothed b| / smoothed b over the
    steps from `window` - 1 on (the largest, its mean, and the step of the largest)."""
    if len(a) != len(b):
        raise ValueError("curves of %d and %d steps" % (len(a), len(b)))
    sa, sb = Smoothed(a, window), Smoothed(b, window)
    rel = [abs(x - y) / abs(y) for x, y in zip(sa, sb)]
    worst = max(range(len(rel)), key=lambda i: rel[i])
    return {"max": rel[worst], "mean": sum(rel) / len(rel), "at_step": worst + window - 1}


def RunHeadroom(headroom, model, precision, batch, epochs, lr, seed, export_dir,
                dataset="fashion-mnist", extra=()):
    """Trains with `headroom train --dataset`; returns {"losses", "summary", "wall_seconds"}."""
    command = ([headroom, "train", "--dataset", dataset] + MODEL_FLAGS[model] +
               ["--batch", str(batch), "--epochs", str(epochs), "--lr", str(lr), "--seed",
                str(seed), "--precision", precision, "--export", export_dir, "--json"] +
               list(extra))
    print("$ " + " ".join(command), flush=True)
    start = time.time()
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    wall = time.time() - start
    summary = [json.loads(line) for line in out.splitlines() if '"summary":true' in line][-1]
    with open(os.path.join(export_dir, "headroom.json")) as f:
        losses = json.load(f)["losses"]
    return {"losses": losses, "summary": summary, "wall_seconds": wall}


def Main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default="bazel-bin/clients/headroom")
    parser.add_argument("--model", default="mlp", choices=sorted(MODEL_FLAGS))
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--window", type=int, default=25, help="steps of the trailing mean")
    args, out = fashion_mnist_bench.ParseBenchArgs(parser, argv, "bf16_band_")

    curves, accuracy = {}, {}
    for precision in ("fp32", "bf16"):
        h = RunHeadroom(args.headroom, args.model, precision, args.batch, args.epochs, args.lr,
                        args.seed, os.path.join(out, precision))
        name = "headroom " + precision
        curves[name] = h["losses"]
        accuracy[name] = h["summary"].get("eval_accuracy")
        print("  %s: %d steps, loss %.5f -> %.5f, test accuracy %.4f, %.1f s"
              % (name, len(h["losses"]), h["losses"][0], h["losses"][-1], accuracy[name],
                 h["wall_seconds"]), flush=True)
    if not args.skip_torch:
        for policy in ("fp32", "autocast", "headroom"):
            t = fashion_mnist_bench.TrainTorch(os.path.join(out, "fp32"), args.epochs,
                                               args.threads, policy)
            name = "torch " + policy
            curves[name] = t["step_losses"]
            accuracy[name] = t["epochs"][-1]["eval_accuracy"]

    steps = len(curves["headroom fp32"])
    print("\n%s, batch %d, %d steps (%d epoch(s)), SGD momentum 0.9, lr %g; trailing mean over "
          "%d steps" % (args.model, args.batch, steps, args.epochs, args.lr, args.window))
    print("%-16s %10s %10s %10s %9s" % ("run", "loss 0", "smoothed", "min smoothed",
                                          "test acc"))
    for name, losses in curves.items():
        s = Smoothed(losses, args.window)
        print("%-16s %10.5f %10.5f %12.5f %9.4f" % (name, losses[0], s[-1], min(s),
                                                     accuracy[name]))
    pairs = [("headroom bf16", "headroom fp32"), ("torch fp32", "headroom fp32")]
    if not args.skip_torch:
        pairs += [("torch autocast", "torch fp32"), ("torch headroom", "torch fp32"),
                  ("headroom bf16", "torch headroom"), ("headroom bf16", "torch autocast")]
    bands = {}
    print("\nband: |smoothed a - smoothed b| / smoothed b over steps %d..%d"
          % (args.window - 1, steps - 1))
    floor = None
    if "torch fp32" in curves:
        floor = Band(curves["torch fp32"], curves["headroom fp32"], args.window)["max"]
    for a, b in pairs:
        band = Band(curves[a], curves[b], args.window)
        bands["%s vs %s" % (a, b)] = band
        ratio = (" %6.2fx the float32 floor" % (band["max"] / floor)) if floor else ""
        print("  %-16s vs %-15s max %.4f (step %d), mean %.4f;%s; test accuracy %+.2f points"
              % (a, b, band["max"], band["at_step"], band["mean"], ratio,
                 100 * (accuracy[a] - accuracy[b])))
    result = {"model": args.model, "batch": args.batch, "epochs": args.epochs, "lr": args.lr,
              "window": args.window, "steps": steps, "curves": curves, "accuracy": accuracy,
              "bands": bands}
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("results in " + os.path.join(out, "result.json"))
    return 0


if __name__ == "__main__":
    sys.exit(Main())
