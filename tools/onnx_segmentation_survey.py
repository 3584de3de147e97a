#!/usr/bin/python3
"""Imports, checks and trains torchvision's segmentation models through ONNX.

For each model (fcn_resnet50, deeplabv3_resnet50, deeplabv3_mobilenet_v3_large and
lraspp_mobilenet_v3_large by default; --models takes any of torchvision 0.14's segmentation
models, and tools/export_onnx.py's norms_test, a small one through GroupNorm and
InstanceNorm for quick checks), built with weights=None, weights_backbone=None and no
auxiliary classifier:
  1. export it as tools/export_onnx.py does (training mode, opset 17, no constant folding,
     a symbolic batch), at --image-size;
  2. `headroom graph --onnx FILE --batch B --json`: does it import, and with PyTorch's
     parameter count? A model that does not import is reported with the op types that
     block it (the importer lists every op it cannot take, with its count);
  3. the logits: a second export with every Dropout's p set to 0 (so that the logits are a
     function of the weights and the images), Headroom's CPU forward pass on B random images
     (tools/onnx_logits, from the export's own weights) against PyTorch's training-mode
     forward (batch statistics), max |ours - PyTorch's| / max |PyTorch's|, target 1e-4;
     and both against PyTorch's forward in float64, the model's own float32 rounding at
     these inputs (where PyTorch's float32 is itself 1e-4 from it, 1e-4 between two float32
     implementations is below what the model's conditioning allows); and PyTorch's float32
     against itself (without oneDNN's convolutions, and on another number of threads);
  4. `headroom plan --onnx FILE --batch B --json`: the training step's arena, with the
     per-pixel loss the importer attaches to [N, 21, H, W] logits (label 255 ignored);
  5. `headroom train --onnx FILE --batch B --budget F*arena --steps S --json`: training
     under --budget-fraction of that arena (sections, recomputation and offload as the
     planner chooses), on the synthetic segmentation task (each sample's pixels carry its
     class, about one in ten the ignored label 255).

    bazel build //clients:headroom //tools:onnx_logits
    /usr/bin/python3 tools/onnx_segmentation_survey.py [--models a,b] [--batch 2]
        [--image-size 64] [--budget-fraction 0.6] [--steps 3] [--json OUT]

Prints one line per model as it goes, then a Markdown table. Exit status 0 when every model
either passed every check or is blocked only by op types the importer names, else 1.
"""

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_onnx  # noqa: E402  (beside this file)
import numpy as np  # noqa: E402
import torch  # noqa: E402

DEFAULT_MODELS = ["fcn_resnet50", "deeplabv3_resnet50", "deeplabv3_mobilenet_v3_large",
                  "lraspp_mobilenet_v3_large"]
LOGITS_TOLERANCE = 1e-4


def run(cmd):
    """Runs a command; returns (exit status, stdout, stderr, seconds)."""
    start = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr.strip(), time.time() - start


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def blocking_ops(error):
    """The op types the importer's error lists as unknown ("Resize x2, Foo x1"), or None."""
    m = re.search(r"cannot import \(\d+ nodes\): (.*)$", error.splitlines()[0])
    return m.group(1) if m else None


def check_logits(name, args, scratch, row):
    """Exports `name` without dropout and compares Headroom's logits with PyTorch's."""
    model = export_onnx.build(name, args.seed)
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    path = export_onnx.export(model, scratch, name + "_nodropout", args.image_size,
                              batch=args.batch)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size,
                    generator=torch.Generator().manual_seed(args.seed + 1))
    with torch.no_grad():
        theirs = model(x)
    theirs = (theirs["out"] if isinstance(theirs, dict) else theirs).numpy()
    inputs = os.path.join(scratch, name + ".input.bin")
    outputs = os.path.join(scratch, name + ".headroom.bin")
    x.numpy().astype("<f4").tofile(inputs)
    status, _, error, _ = run([args.onnx_logits, "--onnx", path, "--batch", str(args.batch),
                               "--inputs", inputs, "--out", outputs])
    if status != 0:
        row["logits"] = "failed: " + error.splitlines()[-1][:200]
        return
    ours = np.fromfile(outputs, dtype="<f4")
    if ours.size != theirs.size:
        row["logits"] = "failed: %d values against PyTorch's %d" % (ours.size, theirs.size)
        return
    diff = float(np.max(np.abs(ours.astype(np.float64) - theirs.reshape(-1))))
    scale = float(np.max(np.abs(theirs)))
    row["logits_relative_error"] = diff / scale if scale > 0 else float("inf")
    row["logits"] = "%.1e" % row["logits_relative_error"]
    # The model's own float32 rounding at these inputs: PyTorch in float64 as the reference
    # for both PyTorch's float32 logits and Headroom's.
    with torch.no_grad():
        exact = model.double()(x.double())
    exact = (exact["out"] if isinstance(exact, dict) else exact).numpy().reshape(-1)
    exact_scale = float(np.max(np.abs(exact)))
    row["torch_float64_error"] = float(np.max(np.abs(theirs.reshape(-1) - exact))) / exact_scale
    row["headroom_float64_error"] = float(np.max(np.abs(ours - exact))) / exact_scale
    row["logits"] += " (float64: PyTorch's %.1e, Headroom's %.1e)" % (
        row["torch_float64_error"], row["headroom_float64_error"])
    # PyTorch's float32 against itself: the same forward with oneDNN's (mkldnn) convolutions
    # turned off, and on one thread instead of the survey's; the larger difference is how far
    # "PyTorch's logits" are defined at these inputs.
    model.float()
    self_errors = []
    threads = torch.get_num_threads()
    for mkldnn, n in ((False, threads), (True, 1 if threads > 1 else 2)):
        torch.backends.mkldnn.enabled = mkldnn
        torch.set_num_threads(n)
        try:
            with torch.no_grad():
                other = model(x)
        finally:
            torch.backends.mkldnn.enabled = True
            torch.set_num_threads(threads)
        other = (other["out"] if isinstance(other, dict) else other).numpy()
        self_errors.append(float(np.max(np.abs(other.astype(np.float64) - theirs))) / scale)
    row["torch_self_error"] = max(self_errors)
    row["logits"] += ", PyTorch against itself %.1e" % row["torch_self_error"]


def check_training(path, args, row):
    """Plans the step unconstrained, then trains under --budget-fraction of its arena."""
    base = ["--onnx", path, "--batch", str(args.batch)]
    status, out, error, seconds = run([args.headroom, "plan"] + base + ["--json"])
    if status != 0:
        row["train"] = "plan failed: " + error.splitlines()[0][:200]
        return
    plan = last_json(out)
    row["arena_bytes"] = int(plan["summary"]["arena_bytes"])
    row["plan_seconds"] = seconds
    budget = int(row["arena_bytes"] * args.budget_fraction)
    row["budget_bytes"] = budget
    train = [args.headroom, "train"] + base + ["--steps", str(args.steps), "--json"]
    status, out, error, seconds = run(train + ["--budget", str(budget)])
    least = re.search(r"below the smallest peak Headroom can plan for this step: .*?\((\d+) "
                      r"bytes\)", error)
    if status != 0 and least:
        # The fraction is below what any plan reaches (parameters, their gradients and
        # momentum live at the peak): train at the least instead, and say so.
        row["least_bytes"] = int(least.group(1))
        budget = row["budget_bytes"] = row["least_bytes"]
        status, out, error, seconds = run(train + ["--budget", str(budget)])
    row["train_seconds"] = seconds
    if status != 0:
        row["train"] = "failed: " + error.splitlines()[0][:200]
        return
    lines = [json.loads(line) for line in out.strip().splitlines() if line.startswith("{")]
    steps = [line for line in lines if "loss" in line]
    summary = lines[-1]
    row["losses"] = [s["loss"] for s in steps]
    row["measured_peak_bytes"] = summary.get("measured_peak_bytes")
    row["predicted_peak_bytes"] = summary.get("predicted_peak_bytes")
    row["sections"] = summary.get("num_sections")
    finite = all(np.isfinite(loss) for loss in row["losses"])
    within = (row["measured_peak_bytes"] is None or row["measured_peak_bytes"] <= budget)
    at = ("%d%% is below the least plan; at the least, %.0f%%" % (
        round(100 * args.budget_fraction), 100.0 * budget / row["arena_bytes"])
          if "least_bytes" in row else "%d%%" % round(100 * args.budget_fraction))
    row["train"] = "%s (%s): %d sections, %d steps, loss %.3f -> %.3f, peak %.1f of %.1f MiB" % (
        "yes" if finite and within else "FAILED", at, row["sections"] or 0, len(row["losses"]),
        row["losses"][0], row["losses"][-1], (row["measured_peak_bytes"] or 0) / 2**20,
        budget / 2**20)
    row["trained"] = finite and within


def survey_one(name, args, scratch):
    row = {"model": name}
    model = export_onnx.build(name, args.seed)
    row["torch_parameters"] = sum(p.numel() for p in model.parameters())
    try:
        path = export_onnx.export(model, scratch, name, args.image_size, batch=args.batch)
    except Exception as e:  # torch's own exporter may refuse a model
        row["status"] = "export failed"
        row["reason"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200])
        return row
    finally:
        del model
    status, out, error, seconds = run([args.headroom, "graph", "--onnx", path, "--batch",
                                       str(args.batch), "--json"])
    row["import_seconds"] = seconds
    if status != 0:
        blocked = blocking_ops(error)
        row["status"] = "blocked" if blocked else "import failed"
        row["reason"] = ("blocked by " + blocked) if blocked else error.replace(path + ": ", "")
        return row
    summary = last_json(out)
    row["parameters"] = summary["num_parameters"]
    row["nodes"] = summary["num_nodes"]
    row["parameters_equal"] = row["parameters"] == row["torch_parameters"]
    check_logits(name, args, scratch, row)
    check_training(path, args, row)
    ok = (row["parameters_equal"] and
          row.get("logits_relative_error", float("inf")) < LOGITS_TOLERANCE and
          row.get("trained", False))
    row["status"] = "ok" if ok else "FAILED"
    return row


def table(rows, args):
    lines = ["| model | imports | parameters (PyTorch's) | logits relative error | "
             "trains under %d%% of the arena |" % round(100 * args.budget_fraction),
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        if "parameters" not in r:
            lines.append("| %s | no: %s | %s | | |" % (
                r["model"], r.get("reason", r["status"]).replace("|", "/")[:200],
                "{:,}".format(r["torch_parameters"])))
            continue
        params = "{:,}".format(r["parameters"]) + (
            " (equal)" if r["parameters_equal"] else
            " (PyTorch's {:,})".format(r["torch_parameters"]))
        lines.append("| %s | yes, %d nodes | %s | %s | %s |" % (
            r["model"], r["nodes"], params, r.get("logits", ""),
            r.get("train", "").replace("|", "/")))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default="bazel-bin/clients/headroom")
    parser.add_argument("--onnx-logits", default="bazel-bin/tools/onnx_logits")
    parser.add_argument("--models", default=",".join(DEFAULT_MODELS),
                        help="comma-separated torchvision segmentation models")
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--image-size", type=int, default=64)
    parser.add_argument("--budget-fraction", type=float, default=0.6)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", default="", help="write the rows here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    names = [n for n in args.models.split(",") if n]
    unknown = sorted(set(names) - set(export_onnx.segmentation_models()) - {"norms_test"})
    if unknown:
        parser.error("not torchvision segmentation models (nor norms_test): " +
                     ", ".join(unknown))
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    scratch = tempfile.mkdtemp(prefix="headroom-segmentation-survey-")
    rows = []
    try:
        for i, name in enumerate(names):
            start = time.time()
            row = survey_one(name, args, scratch)
            rows.append(row)
            detail = row.get("reason") or "params %s, logits %s, train %s" % (
                "equal" if row.get("parameters_equal") else "DIFFER", row.get("logits"),
                row.get("train"))
            print("[%d/%d] %-30s %-8s %6.1f s  %s" % (i + 1, len(names), name, row["status"],
                                                     time.time() - start, detail), flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1)
            export_onnx.remove(scratch, name)
            export_onnx.remove(scratch, name + "_nodropout")
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(table(rows, args))
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    print("\n%d models (torch %s, batch %d, %dx%d): %s" % (
        len(rows), torch.__version__, args.batch, args.image_size, args.image_size,
        ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 0 if counts.get("ok", 0) + counts.get("blocked", 0) == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
