#!/usr/bin/python3
"""Physical memory growth and step time: `headroom train` against PyTorch 1.13, side by side.

Headroom's own peaks (predicted_peak_bytes, measured_peak_bytes) count its arena only. This
benchmark asks what the machine sees: how much resident memory (RSS) a training run adds,
and how long a step takes, for Headroom and for PyTorch training torchvision's own ResNet on
the same CPU with the same number of threads. Every number comes from an instrument the
measured program did not write (/proc for PyTorch, GNU time for Headroom).

Run it with Debian's interpreter, which has PyTorch 1.13 and torchvision, after building
//clients:headroom:

    /usr/bin/python3 tools/physical_bench.py [--models resnet18,resnet50] [--segments 0,2,4,8]
        [--steps 6] [--threads 2] [--repeats 1] [--json OUT] [--cli bazel-bin/clients/headroom]

PyTorch (one fresh child process per configuration: this script with --torch-worker)
----------------------------------------------------------------------------------
torchvision's resnet18/resnet50 (weights=None, num_classes=1000) flattened into one
nn.Sequential of fine units: conv1, bn1, relu, maxpool, every BasicBlock/Bottleneck of
layer1..layer4, avgpool, nn.Flatten(), fc. Every nn.ReLU has inplace=False (checkpointing
cannot recompute an in-place ReLU on a leaf), in every configuration, so that only
checkpointing differs. Batch 16 of random 3x224x224 float32 images and int64 labels (one
batch, made once), cross-entropy, SGD momentum 0.9 lr 0.01, torch.set_num_threads(T).
A configuration is "plain" (segments 0: model(x)) or
torch.utils.checkpoint.checkpoint_sequential(model, S, x) with S segments; the checkpointed
runs give the input requires_grad=True, as the reentrant checkpoint of 1.13 needs (so they
also hold x.grad, 9.2 MiB).

    baseline   VmRSS from /proc/self/status after `import torch, torchvision` and
               torch.set_num_threads, before the model, optimizer and batch exist.
    growth     VmHWM (the process's peak RSS) after the last step, minus the baseline: so
               it includes parameters, gradients, momentum, batch, activations, allocator
               caches and library workspaces, as Headroom's growth does.
    step       time.perf_counter around zero_grad, forward, loss, backward, optimizer.step.

Headroom
--------
`OMP_NUM_THREADS=T /usr/bin/time -v -o FILE headroom train --model M --batch 16 --steps N
--json [--budget BYTES]`; "Maximum resident set size (kbytes)" from FILE is the run's peak
RSS. Its baseline is the peak RSS of the same binary running `headroom graph --model M
--batch 16` (same libraries, same model construction, no planning or training), measured the
same way three times (the median). growth = peak RSS(train) - baseline; step times come from
the per-step JSON lines. Summary keys physical_peak_bytes, baseline_bytes, unplanned_bytes
and host_pool_bytes (Headroom's own accounting) are printed when present, never used.

Points
------
For each model: Headroom unconstrained, then for each PyTorch configuration (plain, and each
segment count) Headroom at the budget that should keep its growth at or below PyTorch's:

    fixed cost = max(0, Headroom unconstrained growth - its predicted_peak_bytes)
    budget     = PyTorch growth - fixed cost

If Headroom's unconstrained growth is already at or below PyTorch's, the unconstrained run
is that point's run (no budget). A budget at or below zero, or one Headroom rejects (it
prints the smallest feasible peak and exits nonzero), is reported "infeasible".

Ratios and targets (marked met / not met as measured, never adjusted):
    growth ratio  Headroom growth / PyTorch growth; target <= 1.0 for Headroom unconstrained
                  against PyTorch plain.
    speedup       PyTorch median step / Headroom median step; target >= 1.2 at every
                  checkpointed point, counted as met only where Headroom's growth is at or
                  below PyTorch's.

Medians: a run's step time is the median of steps 2..N (step 1 is a warm-up). With
--repeats R, phase 1 runs R rounds of [Headroom unconstrained, every PyTorch configuration];
budgets come from the phase-1 medians; phase 2 runs R rounds of every budgeted Headroom
point. Growths and step times in the table are medians over the R runs, because this
machine is shared and noisy. --json OUT writes every run's raw numbers.

Others' cores: around every child process, the non-idle CPU seconds of the whole machine
(/proc/stat) minus the child's own (getrusage of the children), divided by the wall time:
how many cores other processes kept busy, on average, while it ran. With 2 cores and 2
threads, anything well above 0 slows the measured program's steps; the table shows the
largest value behind each row so that a disturbed row can be recognised and rerun.
"""
import argparse
import json
import os
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CLI = os.path.join(ROOT, "bazel-bin", "clients", "headroom")
BATCH = 16
MIB = 2**20
GRAPH_BASELINE_RUNS = 3
SPEEDUP_TARGET = 1.2
HEADROOM_OWN_KEYS = ("physical_peak_bytes", "baseline_bytes", "unplanned_bytes",
                     "host_pool_bytes")


def log(message):
    print(message, file=sys.stderr, flush=True)


def echo(cmd, env):
    log("$ " + " ".join([f"{k}={v}" for k, v in env.items()] + [shlex.join(cmd)]))


def busy_cpu_seconds():
    """Returns the CPU seconds this machine has spent not idle since boot (/proc/stat)."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return (sum(fields[:8]) - idle) / os.sysconf("SC_CLK_TCK")


def children_cpu_seconds():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_child(cmd, env):
    """Returns (CompletedProcess, others' cores): runs `cmd`, and measures the mean number of
    cores that processes other than `cmd` kept busy meanwhile (this machine is shared)."""
    echo(cmd, env)
    busy, own, start = busy_cpu_seconds(), children_cpu_seconds(), time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
    wall = time.perf_counter() - start
    others = busy_cpu_seconds() - busy - (children_cpu_seconds() - own)
    return proc, round(max(0.0, others / wall), 2)


def median_after_warmup(step_seconds):
    """Returns the median of steps 2..N (all steps when there is only one)."""
    return statistics.median(step_seconds[1:] or step_seconds)


# --- PyTorch: runs inside the child process ------------------------------------------------

def proc_status_bytes(field):
    """Returns a kB field of /proc/self/status (VmRSS, VmHWM) in bytes."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def flat_resnet(name):
    """Returns torchvision's `name` as one nn.Sequential of fine units, ReLUs not in place."""
    import torch.nn as nn
    import torchvision
    net = getattr(torchvision.models, name)(weights=None, num_classes=1000)
    units = [net.conv1, net.bn1, net.relu, net.maxpool]
    for layer in (net.layer1, net.layer2, net.layer3, net.layer4):
        units.extend(layer)
    units += [net.avgpool, nn.Flatten(), net.fc]
    model = nn.Sequential(*units)
    for module in model.modules():
        if isinstance(module, nn.ReLU):
            module.inplace = False
    return model


def torch_worker(model_name, segments, steps, threads):
    """Trains one configuration and prints its measurements as one JSON line."""
    import torch
    import torchvision  # noqa: F401 (part of the baseline)
    from torch.utils.checkpoint import checkpoint_sequential
    torch.set_num_threads(threads)
    baseline = proc_status_bytes("VmRSS")

    torch.manual_seed(0)
    model = flat_resnet(model_name)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    images = torch.randn(BATCH, 3, 224, 224, requires_grad=segments > 0)
    labels = torch.randint(0, 1000, (BATCH,))
    loss_fn = torch.nn.CrossEntropyLoss()
    step_seconds = []
    for _ in range(steps):
        start = time.perf_counter()
        optimizer.zero_grad()
        out = checkpoint_sequential(model, segments, images) if segments else model(images)
        loss_fn(out, labels).backward()
        optimizer.step()
        step_seconds.append(time.perf_counter() - start)
    peak = proc_status_bytes("VmHWM")
    print(json.dumps({"model": model_name, "segments": segments, "threads": threads,
                      "baseline_bytes": baseline, "peak_rss_bytes": peak,
                      "growth_bytes": peak - baseline, "step_seconds": step_seconds,
                      "median_step_seconds": median_after_warmup(step_seconds)}))


# --- PyTorch: the parent's side --------------------------------------------------------------

def torch_run(model, segments, args, env):
    """Returns the measurements of one PyTorch configuration, run in a fresh process."""
    cmd = ["/usr/bin/python3", os.path.abspath(__file__), "--torch-worker", model,
           "--worker-segments", str(segments), "--steps", str(args.steps),
           "--threads", str(args.threads)]
    proc, other_cores = run_child(cmd, env)
    if proc.returncode != 0:
        sys.exit(f"PyTorch {model} segments {segments} failed:\n{proc.stderr[-3000:]}")
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]), other_cores=other_cores)


# --- Headroom ----------------------------------------------------------------------------------

def run_under_time(cmd, env):
    """Returns (CompletedProcess, peak RSS in bytes, others' cores) of `cmd` under GNU time."""
    with tempfile.NamedTemporaryFile(mode="r", prefix="physical_bench_time_") as report:
        proc, other_cores = run_child(["/usr/bin/time", "-v", "-o", report.name, *cmd], env)
        for line in report:
            if "Maximum resident set size (kbytes)" in line:
                return proc, int(line.rsplit(":", 1)[1]) * 1024, other_cores
    raise RuntimeError(f"GNU time reported no maximum resident set size for {cmd}")


def headroom_graph_rss(cli, model, env):
    """Returns the peak RSS of `headroom graph` on the model: Headroom's baseline."""
    proc, rss, _ = run_under_time([cli, "graph", "--model", model, "--batch", str(BATCH)], env)
    if proc.returncode != 0:
        sys.exit(f"headroom graph failed: {proc.stderr.strip()}")
    return rss


def headroom_train(cli, model, steps, budget_bytes, env, baseline_bytes):
    """Returns one `headroom train` run: its growth and summary, or infeasible / error."""
    cmd = [cli, "train", "--model", model, "--batch", str(BATCH), "--steps", str(steps),
           "--json"]
    if budget_bytes is not None:
        cmd += ["--budget", str(budget_bytes)]
    proc, rss, other_cores = run_under_time(cmd, env)
    run = {"budget_bytes": budget_bytes, "peak_rss_bytes": rss, "other_cores": other_cores}
    if proc.returncode != 0:
        message = (proc.stderr.strip().splitlines() or ["(no message)"])[0]
        run["infeasible" if "below the smallest peak" in message else "error"] = message
        return run
    lines = [json.loads(line) for line in proc.stdout.splitlines() if line.strip()]
    step_seconds = [line["step_seconds"] for line in lines if "step" in line]
    run.update(summary=lines[-1], step_seconds=step_seconds,
               growth_bytes=rss - baseline_bytes,
               median_step_seconds=median_after_warmup(step_seconds))
    return run


# --- Points ------------------------------------------------------------------------------------

def median_of(runs, key):
    return statistics.median(run[key] for run in runs)


def headroom_summary(runs):
    """Returns the medians of successful runs, or the first failure when one failed."""
    failed = [run for run in runs if "growth_bytes" not in run]
    if failed:
        return {"infeasible": failed[0].get("infeasible"), "error": failed[0].get("error")}
    summary = runs[0]["summary"]
    result = {"growth_bytes": median_of(runs, "growth_bytes"),
              "median_step_seconds": median_of(runs, "median_step_seconds"),
              "predicted_peak_bytes": summary["predicted_peak_bytes"],
              "num_sections": summary["num_sections"],
              "other_cores": max(run["other_cores"] for run in runs)}
    for key in HEADROOM_OWN_KEYS:
        if key in summary:
            result[key] = statistics.median(run["summary"][key] for run in runs)
    return result


def plan_point(segments, torch_runs, free, fixed_cost):
    """Returns a point: PyTorch's medians and the budget Headroom runs at (None: unconstrained)."""
    point = {"segments": segments, "torch_runs": torch_runs, "headroom_runs": [],
             "torch_growth_bytes": median_of(torch_runs, "growth_bytes"),
             "torch_step_seconds": median_of(torch_runs, "median_step_seconds"),
             "torch_other_cores": max(run["other_cores"] for run in torch_runs),
             "budget_bytes": None}
    if free["growth_bytes"] > point["torch_growth_bytes"]:
        point["budget_bytes"] = int(point["torch_growth_bytes"] - fixed_cost)
    return point


def finish_point(point, free):
    """Fills in the point's Headroom medians (the unconstrained ones when it had no budget)."""
    if point["budget_bytes"] is None:
        point["headroom"] = free
    elif point["budget_bytes"] <= 0:
        point["headroom"] = {"infeasible": "PyTorch's growth is below Headroom's fixed cost"}
    else:
        point["headroom"] = headroom_summary(point["headroom_runs"])


def calibrate(model, args, env, baseline):
    """Phase 1: returns (Headroom unconstrained runs, PyTorch runs by segments), R rounds."""
    free_runs, torch_runs = [], {s: [] for s in args.segments}
    for r in range(args.repeats):
        log(f"[{model}] phase 1, round {r + 1}/{args.repeats}: Headroom unconstrained, PyTorch")
        free_runs.append(headroom_train(args.cli, model, args.steps, None, env, baseline))
        for s in args.segments:
            torch_runs[s].append(torch_run(model, s, args, env))
    return free_runs, torch_runs


def run_budgets(model, points, args, env, baseline):
    """Phase 2: runs Headroom R rounds at every positive budget, until a run fails."""
    budgeted = [p for p in points if p["budget_bytes"] and p["budget_bytes"] > 0]
    for r in range(args.repeats):
        log(f"[{model}] phase 2, round {r + 1}/{args.repeats}: Headroom at each budget")
        for point in budgeted:
            if all("growth_bytes" in run for run in point["headroom_runs"]):
                point["headroom_runs"].append(headroom_train(
                    args.cli, model, args.steps, point["budget_bytes"], env, baseline))


def bench_model(model, args, env):
    """Returns every run and point of one model (phases as in the module docstring)."""
    log(f"[{model}] Headroom baseline: `headroom graph` x{GRAPH_BASELINE_RUNS}")
    graph_rss = [headroom_graph_rss(args.cli, model, env) for _ in range(GRAPH_BASELINE_RUNS)]
    baseline = statistics.median(graph_rss)
    free_runs, torch_runs = calibrate(model, args, env, baseline)
    result = {"model": model, "graph_rss_bytes": graph_rss, "baseline_bytes": baseline,
              "headroom_unconstrained_runs": free_runs}
    free = result["headroom_unconstrained"] = headroom_summary(free_runs)
    if "growth_bytes" not in free:
        result["error"] = free["error"] or free["infeasible"]
        return result
    fixed_cost = max(0, free["growth_bytes"] - free["predicted_peak_bytes"])
    result["fixed_cost_bytes"] = fixed_cost
    points = result["points"] = [plan_point(s, torch_runs[s], free, fixed_cost)
                                 for s in args.segments]
    run_budgets(model, points, args, env, baseline)
    for point in points:
        finish_point(point, free)
    return result


# --- Report ------------------------------------------------------------------------------------

COLUMNS = ("model", "PyTorch", "PyTorch growth MiB", "PyTorch step s", "Headroom budget",
           "Headroom growth MiB", "predicted peak MiB", "Headroom step s", "sections",
           "growth ratio", "speedup", "target", "others' cores")


def mib(num_bytes):
    return f"{num_bytes / MIB:.1f}"


def target_cell(segments, unconstrained_row, growth_ratio, speedup):
    """Returns whether the row's target is met, or '-' for a row without one."""
    if unconstrained_row:
        return f"growth <= 1.0: {'met' if growth_ratio <= 1.0 else 'NOT met'}"
    if segments == 0:
        return "-"
    if growth_ratio > 1.0:
        return f"speedup >= {SPEEDUP_TARGET}: NOT met (growth above PyTorch's)"
    return f"speedup >= {SPEEDUP_TARGET}: {'met' if speedup >= SPEEDUP_TARGET else 'NOT met'}"


def row(model, point, headroom, budget_bytes, unconstrained_row):
    """Returns one table row: a PyTorch configuration against one Headroom run."""
    name = "plain" if point["segments"] == 0 else f"checkpoint {point['segments']} segments"
    cells = [model, name, mib(point["torch_growth_bytes"]), f"{point['torch_step_seconds']:.3f}",
             "none" if budget_bytes is None else f"{mib(budget_bytes)} MiB"]
    others = f"{max(point['torch_other_cores'], headroom.get('other_cores', 0)):.2f}"
    if "growth_bytes" not in headroom:
        word = "infeasible" if headroom.get("infeasible") else "error"
        not_met = "-" if point["segments"] == 0 else f"speedup >= {SPEEDUP_TARGET}: NOT met"
        return cells + [f"{word} (below)", "", "", "", "", "", not_met, others]
    growth_ratio = headroom["growth_bytes"] / point["torch_growth_bytes"]
    speedup = point["torch_step_seconds"] / headroom["median_step_seconds"]
    return cells + [mib(headroom["growth_bytes"]), mib(headroom["predicted_peak_bytes"]),
                    f"{headroom['median_step_seconds']:.3f}", str(headroom["num_sections"]),
                    f"{growth_ratio:.2f}", f"{speedup:.2f}",
                    target_cell(point["segments"], unconstrained_row, growth_ratio, speedup),
                    others]


def model_rows(result):
    """Returns the model's rows: PyTorch plain vs Headroom unconstrained, then every point."""
    points = result["points"]
    plain = [p for p in points if p["segments"] == 0]
    rows = [row(result["model"], plain[0], result["headroom_unconstrained"], None, True)]
    rows += [row(result["model"], p, p["headroom"], p["budget_bytes"], False) for p in points]
    return rows


def failure_lines(result):
    """Returns a line for every point Headroom could not run: the first line of its message."""
    return [f"- {result['model']} budget {mib(p['budget_bytes'])} MiB: "
            + ("infeasible: " + p["headroom"]["infeasible"] if p["headroom"].get("infeasible")
               else "error: " + p["headroom"]["error"])
            for p in result["points"] if "growth_bytes" not in p["headroom"]]


def own_accounting_lines(result):
    """Returns lines with Headroom's own memory accounting, for the runs that report it."""
    lines = []
    runs = [("unconstrained", result["headroom_unconstrained"])]
    runs += [(f"budget {mib(p['budget_bytes'])} MiB", p["headroom"])
             for p in result["points"] if p["budget_bytes"]]
    for label, headroom in runs:
        keys = [k for k in HEADROOM_OWN_KEYS if k in headroom]
        if keys:
            lines.append(f"- {result['model']} {label}, Headroom's own accounting: "
                         + ", ".join(f"{k} {mib(headroom[k])} MiB" for k in keys))
    return lines


def print_report(results, args):
    print(f"CPU, {args.threads} threads, batch {BATCH}, {args.steps} steps per run (step 1 "
          f"left out), medians of {args.repeats} run(s). Growth: peak RSS minus start-up RSS "
          f"(PyTorch: VmRSS after import; Headroom: peak RSS of `headroom graph`). Others' "
          f"cores: the most cores other processes kept busy, on average, during any run behind "
          f"the row; well above 0, the row's step times are not to be trusted.")
    print()
    for result in results:
        if "error" in result:
            print(f"- {result['model']}: Headroom unconstrained failed: {result['error']}")
            continue
        print(f"- {result['model']}: Headroom baseline {mib(result['baseline_bytes'])} MiB, "
              f"fixed cost (unconstrained growth - predicted peak) "
              f"{mib(result['fixed_cost_bytes'])} MiB")
    print()
    print("| " + " | ".join(COLUMNS) + " |")
    print("|" + "---|" * len(COLUMNS))
    for result in results:
        if "points" in result:
            for cells in model_rows(result):
                print("| " + " | ".join(cells) + " |")
    extra = [line for result in results if "points" in result
             for lines in (failure_lines(result), own_accounting_lines(result))
             for line in lines]
    if extra:
        print()
        print("\n".join(extra))


def parse_args():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="resnet18,resnet50", help="comma-separated")
    parser.add_argument("--segments", default="0,2,4,8",
                        help="PyTorch configurations: 0 is plain (always run), S > 0 is "
                             "checkpoint_sequential with S segments")
    parser.add_argument("--steps", type=int, default=6, help="steps per run (first: warm-up)")
    parser.add_argument("--threads", type=int, default=2, help="PyTorch and OMP threads")
    parser.add_argument("--repeats", type=int, default=1, help="runs of every configuration")
    parser.add_argument("--json", metavar="OUT", help="write every raw number here")
    parser.add_argument("--cli", default=DEFAULT_CLI, help="the headroom binary")
    parser.add_argument("--torch-worker", metavar="MODEL", help=argparse.SUPPRESS)
    parser.add_argument("--worker-segments", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.models = args.models.split(",")
    args.segments = sorted({int(s) for s in args.segments.split(",")} | {0})
    return args


def main():
    args = parse_args()
    if args.torch_worker:
        return torch_worker(args.torch_worker, args.worker_segments, args.steps, args.threads)
    if not os.access(args.cli, os.X_OK):
        sys.exit(f"{args.cli} is missing: run `bazel build //clients:headroom` first")
    env = {"OMP_NUM_THREADS": str(args.threads)}
    results = [bench_model(model, args, env) for model in args.models]
    print_report(results, args)
    if args.json:
        config = {k: getattr(args, k) for k in ("models", "segments", "steps", "threads",
                                                "repeats", "cli")}
        with open(args.json, "w") as f:
            json.dump({"config": config, "batch": BATCH, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
