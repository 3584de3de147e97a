#!/usr/bin/env python3
"""Collects what tools/gpu/run.sh measured into OUT/figures.json and prints the summary lines.

Reads run.sh's scratch folder: steps.tsv (name, status, exit code, seconds, detail per step),
xml/*.xml (gtest reports), runs/NAME.jsonl (`headroom train --json`), exp/NAME/ (the exported
losses and final_state.bin), torch.jsonl (torch_step_time.py), libs.tsv; and from OUT,
profile.json (`headroom profile --json`) and sanitizer.log. Every figure that could not be
measured is null, with the reason beside it where one is known.
"""

import argparse
import glob
import hashlib
import json
import os
import re
import xml.etree.ElementTree as ET


def read_steps(path):
    steps = {}
    for line in open(path):
        f = line.rstrip("\n").split("\t")
        if len(f) >= 5:
            steps[f[0]] = {"status": f[1], "exit": int(f[2]) if f[2] else None,
                           "seconds": int(f[3]) if f[3] else 0, "detail": f[4]}
    return steps


def gtest_results(scratch, steps):
    tests = {}
    for name, s in steps.items():
        if not name.startswith("test:"):
            continue
        binary = name[len("test:"):]
        t = {"status": s["status"], "detail": s["detail"], "cases": None, "passed": None,
             "failed": None, "skipped": None, "failed_cases": []}
        path = os.path.join(scratch, "xml", binary + ".xml")
        if os.path.exists(path):
            try:
                cases = ET.parse(path).getroot().iter("testcase")
                counts = {"passed": 0, "failed": 0, "skipped": 0}
                for c in cases:
                    if c.find("failure") is not None:
                        counts["failed"] += 1
                        t["failed_cases"].append(c.get("classname", "") + "." + c.get("name", ""))
                    elif c.get("result") == "skipped" or c.find("skipped") is not None:
                        counts["skipped"] += 1
                    else:
                        counts["passed"] += 1
                t.update(counts)
                t["cases"] = sum(counts.values())
                if s["status"] == "pass" and counts["skipped"] == t["cases"]:
                    t["status"] = "skip"
                    t["detail"] = "every case skipped itself"
            except ET.ParseError as e:
                t["detail"] += "; gtest XML unreadable: %s" % e
        tests[binary] = t
    return tests


def train_runs(scratch):
    runs = {}
    for path in sorted(glob.glob(os.path.join(scratch, "runs", "*.jsonl"))):
        name = os.path.basename(path)[:-len(".jsonl")]
        losses, summary = [], None
        for line in open(path):
            try:
                d = json.loads(line)
            except ValueError:
                continue
            if d.get("summary"):
                summary = d
            elif "loss" in d:
                losses.append(d["loss"])
        runs[name] = {"losses": losses, "summary": summary}
    return runs


def exported(scratch, name):
    """Returns (losses, sha256 of final_state.bin) of an exported run, or (None, None)."""
    d = os.path.join(scratch, "exp", name)
    try:
        losses = json.load(open(os.path.join(d, "headroom.json")))["losses"]
        h = hashlib.sha256()
        with open(os.path.join(d, "final_state.bin"), "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
        return losses, h.hexdigest()
    except (OSError, ValueError, KeyError):
        return None, None


def bitwise(scratch, a, b):
    la, sa = exported(scratch, a)
    lb, sb = exported(scratch, b)
    if la is None or lb is None:
        missing = [n for n, l in ((a, la), (b, lb)) if l is None]
        return {"verdict": "not compared", "why": "no export of " + ", ".join(missing)}
    same_losses = la == lb and len(la) > 0
    same_state = sa == sb
    return {"verdict": "bitwise" if same_losses and same_state else "differ",
            "losses_equal": same_losses, "final_state_equal": same_state,
            "losses": {a: la, b: lb}}


def summary_of(runs, name, key):
    s = (runs.get(name) or {}).get("summary") or {}
    return s.get(key)


def ratio(a, b):
    return a / b if a and b else None


def find_keys(obj, pattern, prefix=""):
    """Returns {dotted.key: value} for every scalar whose key matches pattern."""
    found = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = prefix + "." + k if prefix else k
            if isinstance(v, (dict, list)):
                found.update(find_keys(v, pattern, p))
            elif re.search(pattern, k):
                found[p] = v
    return found


def as_int(v):
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def cupti_figures(out, runs):
    path = os.path.join(out, "profile.json")
    try:
        p = json.load(open(path))
    except (OSError, ValueError) as e:
        return {"physical_peak_bytes": None, "why": "no profile.json (%s)" % e.__class__.__name__}
    phys = p.get("physical", {})
    arena = as_int(p.get("plan", {}).get("arena_bytes"))
    workspace = as_int(p.get("workspace_bytes")) or 0
    # The backend's context and handles: from the profile where it says, else from the plain
    # resnet50 training run (same model, batch and backend), whose summary reports it.
    fixed = {k: v for k, v in find_keys(p, r"fixed").items() if as_int(v) is not None}
    fixed_source = "profile.json"
    if not fixed:
        v = summary_of(runs, "r50_plain", "fixed_device_bytes")
        if as_int(v) is not None:
            fixed, fixed_source = {"fixed_device_bytes": v}, "train r50_plain summary"
    fixed_bytes = sum(as_int(v) for v in fixed.values()) if fixed else None
    peak = as_int(phys.get("peak_device_bytes"))
    accounted = (arena or 0) + workspace + (fixed_bytes or 0)
    return {
        "physical_peak_bytes": peak,
        "arena_bytes": arena,
        "workspace_bytes": workspace,
        "fixed_cost_bytes": fixed_bytes,
        "fixed_cost_source": fixed_source if fixed else "not reported",
        "expected_bytes": as_int(phys.get("expected_bytes")),
        "arena_plus_workspace_plus_fixed_bytes": accounted,
        "physical_minus_accounted_bytes": peak - accounted if peak else None,
        "allocations": as_int(phys.get("allocations")),
        "dropped_records": as_int(phys.get("dropped_records")),
        "unavailable_reason": phys.get("unavailable_reason") or None,
        "copy_to_host_bytes_per_second": p.get("copy_to_host_bytes_per_second"),
        "copy_to_device_bytes_per_second": p.get("copy_to_device_bytes_per_second"),
    }


def offload_figures(runs, cupti):
    sectioned_s = summary_of(runs, "r50_sectioned", "median_step_seconds")
    plain_s = summary_of(runs, "r50_plain", "median_step_seconds")
    offloaded = as_int(summary_of(runs, "r50_sectioned", "offloaded_bytes_per_step"))
    # copy_wait_seconds: on CUDA, the compute stream's waits for copies (the exposed copy
    # time), summed over the run's steps.
    wait, steps = summary_of(runs, "r50_sectioned", "copy_wait_seconds"), summary_of(runs, "r50_sectioned", "steps")
    exposed = wait / steps if wait is not None and steps else None
    f = {
        "num_sections": summary_of(runs, "r50_sectioned", "num_sections"),
        "offloaded_bytes_per_step": offloaded,
        "copy_wait_seconds": summary_of(runs, "r50_sectioned", "copy_wait_seconds"),
        "plain_median_step_seconds": plain_s,
        "sectioned_median_step_seconds": sectioned_s,
        "slowdown_seconds": sectioned_s - plain_s if sectioned_s and plain_s else None,
        "exposed_copy_seconds_per_step": exposed,
        "copy_seconds_estimate": None,
        "hidden_fraction": None,
        "hidden_fraction_lower_bound": None,
        "copy_fields_in_train_json": find_keys((runs.get("r50_sectioned") or {}).get("summary") or {},
                                               r"copy|hidden|overlap"),
    }
    up, down = cupti.get("copy_to_host_bytes_per_second"), cupti.get("copy_to_device_bytes_per_second")
    if offloaded and up and down:
        f["copy_seconds_estimate"] = offloaded / up + offloaded / down
        if exposed is not None:
            f["hidden_fraction"] = min(1.0, max(0.0, 1 - exposed / f["copy_seconds_estimate"]))
        if f["slowdown_seconds"] is not None:
            # The slowdown also holds recomputation, so charging all of it to the copies
            # bounds the hidden share from below.
            exposed = max(0.0, f["slowdown_seconds"])
            f["hidden_fraction_lower_bound"] = max(0.0, 1 - exposed / f["copy_seconds_estimate"])
    f["note"] = ("copy time per step estimated from the profile's measured copy rates (out and "
                 "back); hidden_fraction = 1 - exposed / estimate, exposed being the compute "
                 "stream's waits for copies (copy_wait_seconds per step); "
                 "hidden_fraction_lower_bound charges the whole slowdown against plain "
                 "(recomputation included) to the copies")
    return f


def torch_times(scratch):
    t = {}
    path = os.path.join(scratch, "torch.jsonl")
    if os.path.exists(path):
        for line in open(path):
            try:
                d = json.loads(line)
                t[d["model"]] = d
            except (ValueError, KeyError):
                pass
    return t


def sanitizer_errors(out):
    path = os.path.join(out, "sanitizer.log")
    found, name = {}, None
    if not os.path.exists(path):
        return found
    for line in open(path, errors="replace"):
        m = re.match(r"===== (\S+) \(", line)
        if m:
            name = m.group(1)
        m = re.search(r"ERROR SUMMARY: (\d+) error", line)
        if m and name:
            found[name] = {"errors": int(m.group(1))}
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--scratch", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--gpu", default="")
    ap.add_argument("--seconds", type=int, default=0)
    ap.add_argument("--budget", type=int, default=0)
    a = ap.parse_args()

    steps = read_steps(os.path.join(a.scratch, "steps.tsv"))
    runs = train_runs(a.scratch)
    torch = torch_times(a.scratch)
    cupti = cupti_figures(a.out, runs)
    libs = {}
    libs_path = os.path.join(a.scratch, "libs.tsv")
    if os.path.exists(libs_path):
        for line in open(libs_path):
            n, _, d = line.rstrip("\n").partition("\t")
            libs[n] = d or None

    step_times = {}
    for key, run, model in (("resnet50_b64", "r50_plain", "resnet50"),
                            ("transformer_4x768_b8_s256_adam", "gpt_a", "transformer")):
        h = summary_of(runs, run, "median_step_seconds")
        p = (torch.get(model) or {}).get("median_step_seconds")
        step_times[key] = {"headroom_median_step_seconds": h, "pytorch_median_step_seconds": p,
                           "headroom_over_pytorch": ratio(h, p)}
    counts = {s: sum(1 for v in steps.values() if v["status"] == s) for s in ("pass", "fail", "skip")}
    figures = {
        "gpu": a.gpu or None,
        "gpu_present": bool(a.gpu),
        "seconds": a.seconds,
        "budget_seconds": a.budget,
        "counts": counts,
        "steps": steps,
        "tests": gtest_results(a.scratch, steps),
        "bitwise": {
            "resnet50_b64_sectioned_offload_vs_plain": bitwise(a.scratch, "r50_plain", "r50_sectioned"),
            "determinism_resnet18_b32": bitwise(a.scratch, "r18_a", "r18_b"),
            "determinism_transformer_dropout_adam": bitwise(a.scratch, "gpt_a", "gpt_b"),
        },
        "step_seconds": step_times,
        "pytorch": torch,
        "cupti": cupti,
        "offload": offload_figures(runs, cupti),
        "sanitizer": sanitizer_errors(a.out),
        "train_summaries": {n: r["summary"] for n, r in runs.items()},
        "libraries": libs,
    }
    with open(os.path.join(a.out, "figures.json"), "w") as f:
        json.dump(figures, f, indent=1, sort_keys=True)
        f.write("\n")

    # The summary's figures, one line each.
    for name, t in figures["tests"].items():
        if t["cases"] is not None:
            print("CASES %-28s %d passed, %d failed, %d skipped%s" % (
                name[:28], t["passed"], t["failed"], t["skipped"],
                ": " + ", ".join(t["failed_cases"][:5]) if t["failed_cases"] else ""))
    for name, b in figures["bitwise"].items():
        print("%-5s %-28s %s" % ("BITS", name[:28], b["verdict"] + (" (%s)" % b["why"] if "why" in b else "")))
    for key, t in step_times.items():
        print("TIME  %-28s headroom %s s, pytorch %s s, ratio %s" % (
            key[:28], fmt(t["headroom_median_step_seconds"]), fmt(t["pytorch_median_step_seconds"]),
            fmt(t["headroom_over_pytorch"])))
    if cupti.get("physical_peak_bytes"):
        print("CUPTI physical peak %d B; arena %s + workspace %s + fixed %s = %d B; difference %d B" % (
            cupti["physical_peak_bytes"], cupti["arena_bytes"], cupti["workspace_bytes"],
            cupti["fixed_cost_bytes"], cupti["arena_plus_workspace_plus_fixed_bytes"],
            cupti["physical_minus_accounted_bytes"]))
    else:
        print("CUPTI no physical account: %s" % (cupti.get("unavailable_reason") or cupti.get("why") or "not run"))
    o = figures["offload"]
    if o["offloaded_bytes_per_step"]:
        print("OFFLOAD %s B/step, copy estimate %s s/step, exposed %s s/step, hidden %s "
              "(>= %s from the slowdown of %s s)" % (
                  o["offloaded_bytes_per_step"], fmt(o["copy_seconds_estimate"]),
                  fmt(o["exposed_copy_seconds_per_step"]), fmt(o["hidden_fraction"]),
                  fmt(o["hidden_fraction_lower_bound"]), fmt(o["slowdown_seconds"])))
    for name, s in figures["sanitizer"].items():
        print("SAN   %-28s %d errors" % (name[:28], s["errors"]))
    return 0


def fmt(v):
    return "n/a" if v is None else ("%.4g" % v)


if __name__ == "__main__":
    raise SystemExit(main())
