#!/usr/bin/python3
"""Fashion-MNIST target benchmark: Headroom's fit loop against PyTorch 1.13, same model,
same initial weights, same data order, same learning-rate schedule.

    /usr/bin/python3 tools/fashion_mnist_bench.py [--headroom bazel-bin/clients/headroom]
        [--epochs 5] [--batch 64] [--lr 0.05] [--lr-schedule cosine] [--budget 20MiB]
        [--threads 2] [--out DIR] [--skip-torch]

1. `headroom train --dataset fashion-mnist --model small_cnn --epochs E --eval-every 1
   --lr-schedule S --export DIR/export --json`: trains, evaluates on the 10,000 test images
   each epoch (inside the training arena), and exports the graph, the initial weights, the
   order of the training items (data_order.bin) and every step's rate (learning_rates.bin).
2. With --budget: the same run under a budget below the unconstrained peak (sections and
   offload); plans change memory, never math, so its final parameters must be bitwise the
   first run's (checked) and its accuracy the same.
3. PyTorch 1.13 (tools/torch_reference.py's interpreter of the exported graph, so the model
   is the same graph) trains from the exported weights on the exported order at the exported
   rates (SGD with momentum 0.9, as Headroom), then evaluates the test set in eval mode
   (batch norm on its running statistics).

Prints both test accuracies, their difference in points, and for Headroom's run the input
wait and the callbacks' overhead as shares of step time and the seconds per epoch. Timings
are of this machine as it is (shared cores): read them as a ratio, not a promise.
Exit status 1 when the final parameters under the budget differ from the unconstrained
run's.
"""

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

# As headroom does (util/openmp_wait.h): threads that wait sleep instead of spinning, which on
# shared cores keeps a waiting thread from taking the core its partner needs.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
import torch  # noqa: E402
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference  # noqa: E402

FASHION = "/usr/share/datasets/fashion-mnist"


def ReadIdx(path):
    """Returns the array of a gzip-compressed IDX file of unsigned bytes."""
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def RunHeadroom(args, export_dir, budget=None):
    command = [args.headroom, "train", "--dataset", "fashion-mnist", "--model", "small_cnn",
               "--batch", str(args.batch), "--epochs", str(args.epochs), "--eval-every", "1",
               "--lr-schedule", args.lr_schedule, "--lr", str(args.lr), "--seed",
               str(args.seed), "--export", export_dir, "--json", "--progress-seconds", "30"]
    if budget:
        command += ["--budget", budget]
    print("$ " + " ".join(command), flush=True)
    start = time.time()
    out = subprocess.run(command, check=True, stdout=subprocess.PIPE, text=True).stdout
    wall = time.time() - start
    epochs, summary = [], None
    for line in out.splitlines():
        record = json.loads(line)
        if record.get("summary"):
            summary = record
        elif "epoch" in record:
            epochs.append(record)
            print("  headroom epoch %d: train loss %.5f, test accuracy %.4f, %.1f s"
                  % (record["epoch"] + 1, record["train_loss"], record.get("eval_accuracy", -1),
                     record["epoch_seconds"]), flush=True)
    summary["wall_seconds"] = wall
    summary["epoch_records"] = epochs
    return summary


def BatchNormEval(x, attrs, node):
    return F.batch_norm(x[0], x[3], x[4], x[1], x[2], training=False,
                        momentum=attrs["momentum"], eps=attrs["epsilon"])


def RunTorch(args, export_dir):
    return TrainTorch(export_dir, args.epochs, args.threads)["epochs"]


def SetPolicy(policy):
    """Sets torch_reference's precision policy for the interpreters made after it: "fp32"
    (the export's float32), "autocast" (torch.autocast's CPU bf16) or "headroom" (Headroom's
    bf16 policy, torch_reference.HeadroomBf16)."""
    if policy not in ("fp32", "autocast", "headroom"):
        raise ValueError("policy '%s' is not fp32, autocast or headroom" % policy)
    torch_reference.AUTOCAST_BF16 = policy == "autocast"
    torch_reference.HEADROOM_BF16 = policy == "headroom"


def TrainTorch(export_dir, epochs, threads, policy="fp32"):
    """Trains a `headroom train --dataset fashion-mnist --export` directory with PyTorch from
    its initial weights on its data order at its rates, evaluating the test set after each
    epoch; returns {"step_losses": [...], "epochs": [{"epoch", "eval_loss",
    "eval_accuracy", "train_seconds"}]}. `policy`: SetPolicy's."""
    torch.set_num_threads(threads)
    SetPolicy(policy)
    export = torch_reference.Export.Load(export_dir)
    interpreter = torch_reference.GraphInterpreter(export)
    model = torch_reference.Model(export, interpreter)
    images_name = export.Names("input")[0]
    labels_name = export.Names("label")[0]
    image_shape = export.tensors[images_name]["shape"][1:]  # [1, 28, 28], or [784] (mlp)
    train_x = ReadIdx(os.path.join(FASHION, "train-images-idx3-ubyte.gz"))
    train_y = ReadIdx(os.path.join(FASHION, "train-labels-idx1-ubyte.gz"))
    test_x = ReadIdx(os.path.join(FASHION, "t10k-images-idx3-ubyte.gz"))
    test_y = ReadIdx(os.path.join(FASHION, "t10k-labels-idx1-ubyte.gz"))
    order = np.fromfile(os.path.join(export_dir, "data_order.bin"), dtype="<i8")
    rates = np.fromfile(os.path.join(export_dir, "learning_rates.bin"), dtype="<f8")
    steps = len(rates)
    batch = len(order) // steps
    order = order.reshape(steps, batch)
    steps_per_epoch = steps // epochs

    def Batch(x, y, items):
        pixels = torch.from_numpy(x[items].astype(np.float32) / np.float32(255))
        return {images_name: pixels.reshape([len(items)] + list(image_shape)),
                labels_name: torch.from_numpy(y[items].astype(np.int64))}

    # Evaluation: the same graph with batch norm in eval mode; the last batch is filled with
    # the first items, which are not counted (as Headroom does).
    saved = torch_reference.OPS["BatchNorm"]
    torch_reference.OPS["BatchNorm"] = BatchNormEval
    eval_interpreter = torch_reference.GraphInterpreter(export)
    torch_reference.OPS["BatchNorm"] = saved
    logits_name = [n for n in export.nodes if n["op"] == "SoftmaxCrossEntropy"][0]["inputs"][0]

    def Evaluate():
        correct, loss_sum = 0, 0.0
        n = len(test_y)
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16,
                                             enabled=torch_reference.AUTOCAST_BF16):
            for first in range(0, n, batch):
                count = min(batch, n - first)
                items = np.array([first + i if i < count else i % n for i in range(batch)])
                leaves = dict(model.parameters)
                leaves.update(model.buffers)
                leaves.update(Batch(test_x, test_y, items))
                env = dict(leaves)
                for name in eval_interpreter.bf16_casts:
                    env[name] = env[name].to(torch.bfloat16)
                for node, fn, attrs, drop in eval_interpreter.nodes:
                    out = fn([env[name] for name in node["inputs"]], attrs, node)
                    outs = out if isinstance(out, list) else [out]
                    for name, value in zip(node["outputs"], outs):
                        env[name] = value
                logits = env[logits_name][:count].double()
                labels = leaves[labels_name][:count]
                correct += int((logits.argmax(dim=1) == labels).sum())
                loss_sum += float(F.cross_entropy(logits, labels, reduction="sum"))
        return loss_sum / n, correct / n

    epoch_records, step_losses = [], []
    for e in range(epochs):
        start = time.perf_counter()
        for s in range(e * steps_per_epoch, (e + 1) * steps_per_epoch):
            for group in model.optimizer.param_groups:
                group["lr"] = float(rates[s])
            step_losses.append(model.Step(Batch(train_x, train_y, order[s]))[0])
            if (s + 1) % 200 == 0:
                print("  torch %-8s step %d/%d, %.1f s" % (policy, s + 1, steps,
                                                          time.perf_counter() - start),
                      flush=True)
        train_seconds = time.perf_counter() - start
        loss, accuracy = Evaluate()
        epoch_records.append({"epoch": e, "eval_loss": loss, "eval_accuracy": accuracy,
                              "train_seconds": train_seconds})
        print("  torch %-8s epoch %d: test loss %.5f, test accuracy %.4f, %.1f s train"
              % (policy, e + 1, loss, accuracy, train_seconds), flush=True)
    SetPolicy("fp32")
    return {"step_losses": step_losses, "epochs": epoch_records}


def ParseBenchArgs(parser, argv, prefix):
    """Adds the flags every Fashion-MNIST benchmark has (--threads, --out, --skip-torch) to
    `parser` and parses `argv`; returns (args, the output folder, made: --out, else a new
    temporary folder named `prefix`...)."""
    parser.add_argument("--threads", type=int, default=2, help="PyTorch's threads")
    parser.add_argument("--out", default="", help="keep the exports and result.json here")
    parser.add_argument("--skip-torch", action="store_true")
    args = parser.parse_args(argv)
    out = args.out or tempfile.mkdtemp(prefix=prefix)
    os.makedirs(out, exist_ok=True)
    return args, out


def Main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default="bazel-bin/clients/headroom")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--lr-schedule", default="cosine")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--budget", default="", help="also train under this budget")
    args, out = ParseBenchArgs(parser, argv, "fashion_bench_")

    result = {"epochs": args.epochs, "batch": args.batch, "lr": args.lr,
              "lr_schedule": args.lr_schedule}
    h = RunHeadroom(args, os.path.join(out, "unconstrained"))
    result["headroom"] = h
    steps = h["step_seconds_total"]
    print("headroom: test accuracy %.4f (loss %.5f); peak %d B predicted, %d B measured; "
          "input wait %.3f%% of step time; callback overhead %.3f%% (evaluation %.1f s, "
          "%.2f%%); %.1f s per epoch"
          % (h["eval_accuracy"], h["eval_loss"], h["predicted_peak_bytes"],
             h["measured_peak_bytes"], 100 * h["input_wait_fraction"],
             100 * h["callback_overhead_fraction"], h["eval_seconds"],
             100 * h["eval_seconds"] / steps, h["train_seconds"] / max(1, h["epochs"])),
          flush=True)
    status = 0
    if args.budget:
        b = RunHeadroom(args, os.path.join(out, "budget"), args.budget)
        result["budget"] = b
        same = open(os.path.join(out, "unconstrained", "final_state.bin"), "rb").read() == \
            open(os.path.join(out, "budget", "final_state.bin"), "rb").read()
        print("headroom under --budget %s: plan '%s', %d section(s), peak %d B predicted, %d B "
              "measured (unconstrained %d B); test accuracy %.4f; final parameters %s"
              % (args.budget, b["strategy"], b["num_sections"], b["predicted_peak_bytes"],
                 b["measured_peak_bytes"], h["predicted_peak_bytes"], b["eval_accuracy"],
                 "bitwise equal" if same else "DIFFERENT"), flush=True)
        result["budget_bitwise_equal"] = same
        status = 0 if same else 1
    if not args.skip_torch:
        t = RunTorch(args, os.path.join(out, "unconstrained"))
        result["torch"] = t
        diff = 100 * (h["eval_accuracy"] - t[-1]["eval_accuracy"])
        result["accuracy_difference_points"] = diff
        print("torch 1.13: test accuracy %.4f (loss %.5f); %.1f s per epoch of training"
              % (t[-1]["eval_accuracy"], t[-1]["eval_loss"],
                 sum(e["train_seconds"] for e in t) / len(t)))
        print("accuracy: headroom %.2f%%, torch %.2f%%, difference %+.2f points"
              % (100 * h["eval_accuracy"], 100 * t[-1]["eval_accuracy"], diff))
    with open(os.path.join(out, "result.json"), "w") as f:
        json.dump(result, f, indent=1)
    print("results in " + os.path.join(out, "result.json"))
    return status


if __name__ == "__main__":
    sys.exit(Main())
