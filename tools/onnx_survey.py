#!/usr/bin/python3
"""Imports and plans every classification model of torchvision through ONNX.

For each model (all 80 of torchvision 0.14 by default), one at a time so that at most one
model's weights sit on disk:
  1. export it with tools/export_onnx.py's export (random weights, training mode, opset 17);
     a model torch cannot export is counted as such, with torch's reason;
  2. `headroom graph --onnx FILE --batch B --json`: the import, whose parameter count must
     equal PyTorch's (sum of p.numel() over model.parameters());
  3. `headroom plan --onnx FILE --batch B --json`: the training step's memory plan (arena and
     lower bound);
  4. with --budget-fraction F, `headroom plan ... --budget` at F of that arena: the section
     search under a budget.
A model either imports and plans, or is rejected with the importer's message (which lists
every unsupported op with its count).

    /usr/bin/python3 tools/onnx_survey.py [--headroom bazel-bin/clients/headroom]
        [--models a,b] [--batch 32] [--budget-fraction 0.6] [--json OUT]

Prints one line per model as it goes, then a Markdown table and the counts. Exit status 0
when every exported model imported and planned with PyTorch's parameter count or was
rejected with its list of unsupported ops, else 1.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_onnx  # noqa: E402  (beside this file)
import torch  # noqa: E402


def run_json(cmd):
    """Runs a headroom command; returns (parsed JSON or None, stderr text, seconds)."""
    start = time.time()
    p = subprocess.run(cmd, capture_output=True, text=True)
    seconds = time.time() - start
    if p.returncode != 0:
        return None, p.stderr.strip(), seconds
    return json.loads(p.stdout.strip().splitlines()[-1]), "", seconds


def survey_one(name, args, scratch):
    row = {"model": name}
    model = export_onnx.build(name, 0)
    row["torch_parameters"] = sum(p.numel() for p in model.parameters())
    size = export_onnx.image_size(name, 0)
    try:
        path = export_onnx.export(model, scratch, name, size)
    except Exception as e:  # torch's own exporter refuses some models
        row["status"] = "export failed"
        row["reason"] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:200])
        return row
    finally:
        del model
    try:
        row["onnx_mib"] = sum(os.path.getsize(os.path.join(dp, f))
                              for dp, _, fs in os.walk(scratch) for f in fs) / 2**20
        base = [args.headroom, "--onnx", path, "--batch", str(args.batch)]
        summary, error, import_s = run_json([args.headroom, "graph"] + base[1:] + ["--json"])
        if summary is None:
            # Rejected means the one error listing unsupported ops; anything else is a failure.
            row["status"] = ("rejected" if "op type(s) Headroom cannot import" in error
                             else "import failed")
            row["reason"] = error.replace("headroom graph: ", "").replace(path + ": ", "")
            return row
        row["import_seconds"] = import_s
        row["parameters"] = summary["num_parameters"]
        row["nodes"] = summary["num_nodes"]
        plan, error, plan_s = run_json([args.headroom, "plan"] + base[1:] + ["--json"])
        if plan is None:
            row["status"] = "plan failed"
            row["reason"] = error
            return row
        row["plan_seconds"] = plan_s
        # Protobuf's JSON of the PlanResponse: 64-bit integers are strings.
        row["arena_bytes"] = int(plan["summary"]["arena_bytes"])
        row["lower_bound_bytes"] = int(plan["summary"]["lower_bound_bytes"])
        row["status"] = "ok" if row["parameters"] == row["torch_parameters"] else "parameters differ"
        if args.budget_fraction > 0:
            budget = int(plan["arena_bytes"] * args.budget_fraction)
            planned, error, budget_s = run_json(
                [args.headroom, "plan"] + base[1:] + ["--budget", str(budget), "--json"])
            row["budget_bytes"] = budget
            row["budget_seconds"] = budget_s
            if planned is None:
                row["budget_result"] = error.splitlines()[0][:160]
            else:
                summary = planned["summary"]
                row["budget_peak_bytes"] = int(summary.get("predicted_peak_bytes", 0))
                row["budget_sections"] = len(planned.get("sections", []))
                row["budget_overhead"] = summary.get("overhead_ratio", 0)
        return row
    finally:
        export_onnx.remove(scratch, name)


def table(rows):
    lines = ["| model | status | parameters (PyTorch) | Headroom nodes | training arena | "
             "lower bound | import + plan s | note |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        note = r.get("reason", "")
        if "budget_peak_bytes" in r:
            note = "%.0f%% budget: %d sections, %.2fx step" % (
                100 * r["budget_bytes"] / r["arena_bytes"], r["budget_sections"],
                r["budget_overhead"])
        elif "budget_result" in r:
            note = r["budget_result"]
        lines.append("| %s | %s | %s | %s | %s | %s | %s | %s |" % (
            r["model"], r["status"],
            "{:,}".format(r["torch_parameters"]),
            r.get("nodes", ""),
            "%.1f MiB" % (r["arena_bytes"] / 2**20) if "arena_bytes" in r else "",
            "%.1f MiB" % (r["lower_bound_bytes"] / 2**20) if "lower_bound_bytes" in r else "",
            "%.1f" % (r["import_seconds"] + r["plan_seconds"]) if "plan_seconds" in r else "",
            note.replace("|", "/")[:300]))
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--headroom", default="bazel-bin/clients/headroom")
    parser.add_argument("--models", default="", help="comma-separated (default: all 80)")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--budget-fraction", type=float, default=0.0,
                        help="also plan under this fraction of the unconstrained arena")
    parser.add_argument("--json", default="", help="write the rows here")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    names = [n for n in args.models.split(",") if n] or export_onnx.all_models()
    torch.set_num_threads(max(1, os.cpu_count() or 1))
    scratch = tempfile.mkdtemp(prefix="headroom-onnx-survey-")
    rows = []
    try:
        for i, name in enumerate(names):
            start = time.time()
            row = survey_one(name, args, scratch)
            rows.append(row)
            print("[%d/%d] %-20s %-17s %6.1f s  %s" % (
                i + 1, len(names), name, row["status"], time.time() - start,
                row.get("reason", "%.1f MiB arena" % (row.get("arena_bytes", 0) / 2**20))[:150]),
                flush=True)
            if args.json:
                with open(args.json, "w") as f:
                    json.dump(rows, f, indent=1)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print()
    print(table(rows))
    counts = {}
    for r in rows:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    exported = len(rows) - counts.get("export failed", 0)
    print("\n%d models: %d exported to ONNX by torch %s; of those %d imported and planned with "
          "PyTorch's parameter count, %d rejected, %d other (%s)" % (
              len(rows), exported, torch.__version__, counts.get("ok", 0),
              counts.get("rejected", 0), exported - counts.get("ok", 0) - counts.get("rejected", 0),
              ", ".join("%s %d" % kv for kv in sorted(counts.items()))))
    return 0 if counts.get("ok", 0) + counts.get("rejected", 0) == exported else 1


if __name__ == "__main__":
    sys.exit(main())
