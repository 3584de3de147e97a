#!/usr/bin/python3
"""Re-batches torchvision's classifiers exported as PyTorch's tutorial exports them.

For each model, one at a time:
  1. export it the tutorial's way: `torch.onnx.export(model, torch.randn(1, 3, S, S), path)`,
     random weights, fixed batch 1, no dynamic_axes, inference mode, constant folding on
     (torch's default opset, 14);
  2. `headroom plan --onnx FILE --batch 8 --json`: the import re-batched to 8 and its memory
     plan (and whether the import named the export an inference export);
  3. the logits at batch 1 and at batch 8: `onnx_logits` (tools/onnx_logits.cc: Headroom's
     CPU forward pass from the model's own weights) against PyTorch's on the same inputs.
     Headroom trains what it imports, so a batch norm left in the export (one torch could not
     fold into a convolution) normalises with the batch's statistics; PyTorch's reference
     runs those modules (found by the ONNX node names, which carry the module path) in
     training mode and the rest in eval mode, as the exported graph computes.
     Relative error: max |ours - PyTorch's| / max |PyTorch's|; the target is 1e-4.

    /usr/bin/python3 tools/onnx_rebatch_survey.py [--all | --models a,b] [--batch 8]
        [--headroom bazel-bin/clients/headroom] [--logits bazel-bin/tools/onnx_logits]
        [--json OUT]

(after `bazel build //clients:headroom //tools:onnx_logits`). The default is a subset that
runs in a few minutes on two cores; --all takes every classifier of torchvision. Prints a
line per model, then a Markdown table and the counts. Exit status 0 when every model torch
exports plans at the batch and matches PyTorch's logits at both batches, else 1.
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
import torch  # noqa: E402

# Families whose fixed-batch exports differ the most: a channel shuffle (shufflenet), a
# flatten (resnet, squeezenet), squeeze-excitation (mobilenet_v3, efficientnet), the class
# token and attention (vit), windows (swin), a pre-activation batch norm (densenet).
DEFAULT_MODELS = ["shufflenet_v2_x0_5", "resnet18", "squeezenet1_1", "mobilenet_v3_small",
                  "efficientnet_b0", "densenet121", "vit_b_32", "swin_t"]
TARGET = 1e-4


def export_fixed(model, out, name, size):
    """Writes the tutorial's export of `model` under `out`; returns the model file's path."""
    scratch = os.path.join(out, "." + name + ".tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    # As the tutorial does it, gradients on: under torch.no_grad() torch 1.13's attention
    # takes its fused inference path, which has no ONNX form.
    torch.onnx.export(model, torch.randn(1, 3, size, size), os.path.join(scratch, "model.onnx"))
    return export_onnx.place(scratch, out, name)


def run(cmd):
    """Runs a command; returns (stdout, stderr, seconds), stdout None when it failed."""
    start = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    return (p.stdout if p.returncode == 0 else None), p.stderr.strip(), time.time() - start


def kept_batch_norms(args, path, batch, scratch):
    """Returns the module paths of the batch norms the export kept (not folded)."""
    emitted = os.path.join(scratch, "emitted.pbtxt")
    out, error, _ = run([args.headroom, "graph", "--onnx", path, "--batch", str(batch),
                         "--emit", emitted])
    if out is None:
        raise RuntimeError(error)
    with open(emitted) as f:
        text = f.read()
    os.remove(emitted)
    # torch names a node after its module's scope: "/features/norm0/BatchNormalization".
    names = re.findall(r'nodes \{\s*name: "([^"]*)"\s*op: "BatchNorm"', text)
    return {n.strip("/").rsplit("/", 1)[0].replace("/", ".") for n in names}


def reference_logits(model, x, kept):
    """PyTorch's logits for `x`: eval mode, but the batch norms the export kept in training
    mode (as Headroom's import computes them), their running statistics restored after."""
    model.eval()
    saved = {}
    for name, m in model.named_modules():
        if name in kept and isinstance(m, torch.nn.modules.batchnorm._BatchNorm):
            saved[name] = {k: v.clone() for k, v in m.state_dict().items()}
            m.train()
    with torch.no_grad():
        y = model(x)
    for name, m in model.named_modules():
        if name in saved:
            m.load_state_dict(saved[name])
            m.eval()
    return y.numpy()


def headroom_logits(args, path, x, scratch):
    import numpy as np
    inputs = os.path.join(scratch, "inputs.bin")
    logits = os.path.join(scratch, "logits.bin")
    x.numpy().astype("<f4").tofile(inputs)
    out, error, _ = run([args.logits, "--onnx", path, "--batch", str(x.shape[0]),
                         "--inputs", inputs, "--out", logits])
    if out is None:
        raise RuntimeError(error.replace("onnx_logits: ", ""))
    y = np.fromfile(logits, dtype="<f4")
    os.remove(inputs)
    os.remove(logits)
    return y


def relative_error(ours, theirs):
    import numpy as np
    theirs = theirs.reshape(-1)
    if ours.size != theirs.size:
        return float("inf")
    return float(np.abs(ours - theirs).max() / max(np.abs(theirs).max(), 1e-30))


def survey_one(name, args, scratch):
    row = {"model": name}
    model = export_onnx.build(name, 0).eval()
    # torchvision starts vit's head at zero, which would make every logit its bias.
    for m in model.modules():
        if isinstance(m, torch.nn.Linear) and not m.weight.detach().any():
            torch.nn.init.normal_(m.weight, std=0.02)
    size = export_onnx.image_size(name, 0)
    try:
        path = export_fixed(model, scratch, name, size)
    except Exception as e:  # torch's own exporter refuses some models
        row["status"] = "export failed"
        row["reason"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200])
        return row
    try:
        out, error, seconds = run([args.headroom, "plan", "--onnx", path, "--batch",
                                   str(args.batch), "--json"])
        if out is None:
            row["status"] = "plan failed"
            row["reason"] = error.replace("headroom plan: ", "").replace(path + ": ", "")
            return row
        plan = json.loads(out.strip().splitlines()[-1])
        row["plan_seconds"] = seconds
        row["arena_bytes"] = int(plan["summary"]["arena_bytes"])
        row["inference_export"] = plan.get("inference_export", False)
        try:
            kept = kept_batch_norms(args, path, args.batch, scratch)
            row["kept_batch_norms"] = len(kept)
            x = torch.randn(args.batch, 3, size, size, generator=torch.Generator().manual_seed(1))
            for batch, inputs in (("1", x[:1]), (str(args.batch), x)):
                theirs = reference_logits(model, inputs, kept)
                ours = headroom_logits(args, path, inputs, scratch)
                row["error_at_" + batch] = relative_error(ours, theirs)
            # How much the logits depend on the input: a random initialisation can shrink
            # the activations to nothing (googlenet's), leaving logits equal to the last
            # bias for every sample, which any import would match.
            spread = float(abs(theirs - theirs[:1]).max() / max(abs(theirs).max(), 1e-30))
            row["sample_spread"] = spread
            # The same error on what differs between the samples (each logit less the batch's
            # mean), where a bias common to all samples cannot hide a difference; reported,
            # not judged: where the samples differ little it measures float32 rounding.
            centred = theirs - theirs.mean(axis=0)
            ours_centred = ours.reshape(theirs.shape) - ours.reshape(theirs.shape).mean(axis=0)
            row["centred_error_at_%d" % args.batch] = relative_error(ours_centred.reshape(-1), centred)
            if spread < 1e-3:
                row["reason"] = ("weak check: the logits differ by %.0e of their size between "
                                 "samples; the centred error is float32 rounding of the rest"
                                 % spread)
        except Exception as e:
            row["status"] = "logits failed"
            row["reason"] = str(e).splitlines()[-1][:300] if str(e) else type(e).__name__
            return row
        worst = max(row["error_at_1"], row["error_at_" + str(args.batch)])
        row["status"] = "ok" if worst <= TARGET else "logits differ"
        return row
    finally:
        del model
        export_onnx.remove(scratch, name)


def table(rows, batch):
    lines = ["| model | status | arena at batch %d | inference export | batch norms kept | "
             "relative error at 1 | at %d | centred at %d | note |" % (batch, batch, batch),
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        centred = r.get("centred_error_at_%d" % batch)
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["status"],
            "%.1f MiB" % (r["arena_bytes"] / 2**20) if "arena_bytes" in r else "",
            {True: "yes", False: "no"}.get(r.get("inference_export"), ""),
            r.get("kept_batch_norms", ""),
            "%.1e" % r["error_at_1"] if "error_at_1" in r else "",
            "%.1e" % r["error_at_%d" % batch] if "error_at_%d" % batch in r else "",
            "%.1e" % centred if centred is not None else "",
            r.get("reason", "").replace("|", "/")[:300]))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default="bazel-bin/clients/headroom")
    parser.add_argument("--logits", default="bazel-bin/tools/onnx_logits")
    parser.add_argument("--models", default="", help="comma-separated torchvision names")
    parser.add_argument("--all", action="store_true", help="every classifier of torchvision")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--json", default="", help="write the rows here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    names = ([n for n in args.models.split(",") if n] or
             (export_onnx.all_models() if args.all else DEFAULT_MODELS))
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    scratch = tempfile.mkdtemp(prefix="headroom-onnx-rebatch-")
    rows = []
    try:
        for i, name in enumerate(names):
            start = time.time()
            row = survey_one(name, args, scratch)
            rows.append(row)
            print("[%d/%d] %-20s %-14s %6.1f s  %s" % (
                i + 1, len(names), name, row["status"], time.time() - start,
                ("errors %.1e / %.1e  " % (row["error_at_1"], row["error_at_%d" % args.batch])
                 if "error_at_1" in row else "") + row.get("reason", "")[:200]),
                flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(table(rows, args.batch))
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    exported = len(rows) - counts.get("export failed", 0)
    planned = sum(1 for r in rows if "arena_bytes" in r)
    print("\n%d models: torch %s exported %d at batch 1; %d planned at batch %d; %d matched "
          "PyTorch's logits at batch 1 and %d within %.0e (%s)" % (
              len(rows), torch.__version__, exported, planned, args.batch,
              counts.get("ok", 0), args.batch, TARGET,
              ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 0 if counts.get("ok", 0) == exported else 1


if __name__ == "__main__":
    sys.exit(main())
