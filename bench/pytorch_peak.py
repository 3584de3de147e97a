#!/usr/bin/python3
"""PyTorch reference for Headroom's planner benchmark: peak CPU memory of one training step.

Builds a torchvision classification model with random weights (weights=None, nothing is
downloaded), a synthetic batch (float32 images, int64 labels) from a seed, and an optimizer
(SGD with momentum 0.9 by default).  It runs one warm-up step, so that the momentum buffers
exist, then measures ONE training step:

    optimizer.zero_grad(set_to_none=True); out = model(x); loss = cross_entropy(out, y);
    loss.backward(); optimizer.step()

and reports the peak of live tensor bytes during that step.

Method ("profiler-allocator-counter")
-------------------------------------
torch.profiler.profile(profile_memory=True) is opened BEFORE the model is built and closed
after the measured step, so every CPU tensor allocation and free of the run goes through
c10's ProfiledCPUMemoryReporter while profiling is on.  For each allocation and free that
reporter emits one profiler event carrying the signed size, the pointer, a nanosecond
timestamp and `total_allocated`, its own running count of live bytes of the c10 CPU
allocator.  In torch 1.13 these events are reachable through
prof.profiler.kineto_results.experimental_event_tree() (tag _EventType.Allocation,
extra_fields = _ExtraFields_Allocation).  We sort them by time and verify that the running
sum of the signed sizes equals `total_allocated` at every event (it must, since nothing was
allocated before profiling began); the peak during the step is the largest
`total_allocated` among the events between the start and end of the step (taken from
record_function markers in the same event tree), or the live bytes at the step's start if
larger.

Why the profiler is opened before the model is built: the reporter only knows the size of
blocks it saw allocated; a block allocated before profiling and freed during it (here: the
warm-up step's gradients, freed by zero_grad(set_to_none=True)) produces no event at all, so
a profile opened just around the step would over-count everything after zero_grad by the
gradient bytes.  With the profiler open for the whole run, the counter is the exact number
of live bytes that c10's CPU allocator has handed out and not yet taken back.

The tensor-side baseline (parameters + buffers + optimizer state + input batch + labels,
sum of numel*element_size over distinct storages) is computed independently and checked
against the counter right after zero_grad: they should be equal, i.e. nothing else is live.
(The record_function markers themselves allocate a 4-byte handle and a 288-byte record,
so phase values can differ from tensor sums by a few hundred bytes.)

    peak_bytes                      = max counter during the step (absolute)
    step_peak_above_baseline_bytes  = peak_bytes - baseline_bytes

Alternatives examined: key_averages()/events() "Self CPU Mem" only sums per op (no time
order, no peak); the "[memory]" kineto events (prof.profiler.kineto_results.events(),
name "[memory]", nbytes()) carry the same signed sizes but microsecond timestamps, so
allocations and frees in the same microsecond cannot be ordered; they are the fallback when
the event tree is missing.  torch 1.13 has no CPU allocator statistics API
(torch.cuda.memory_stats is CUDA only; there is no torch.cpu.memory_stats), so the profiler
counter is the allocator's own number.  ru_maxrss (reported as a cross-check) is a process
high-water mark since start; the warm-up step already reached about the same peak, so its
growth during the measured step is about zero.  We therefore also reset the kernel's peak
RSS (write "5" to /proc/self/clear_refs) before the step and read VmHWM after it:
rss_growth_bytes = VmHWM after - VmRSS before.  RSS counts pages, not tensors: glibc keeps
freed small blocks, pages of torch.empty that are never written are not counted, and
profiler bookkeeping and libraries' own buffers are; treat it as a rough check.

Also reported: per-phase peaks (zero_grad, forward, loss, backward, optimizer), the live
bytes at the end of the forward pass, and (from the warm-up step, via
torch.autograd.graph.saved_tensors_hooks) the bytes of distinct storages autograd saved for
backward, split into persistent tensors (parameters, buffers, inputs) and activations.

Examples:
    bench/pytorch_peak.py --model resnet50 --batch 32 --json
    bench/pytorch_peak.py --model mobilenet_v2 --batch 8
"""

import argparse
import gc
import json
import os
import re
import resource
import sys
import time

import torch
import torch.nn.functional as F
import torchvision
from torch.profiler import ProfilerActivity, profile, record_function

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools"))
from torch_events import ALLOCATION_HELPERS, WalkEvents  # noqa: E402

# torchvision's parameter counts at 1000 classes, to check the model we built.
KNOWN_PARAMETERS = {
    "resnet18": 11689512,
    "resnet34": 21797672,
    "resnet50": 25557032,
    "resnet101": 44549160,
    "resnet152": 60192808,
    "vgg16": 138357544,
    "mobilenet_v2": 3504872,
}

PHASES = ("zero_grad", "forward", "loss", "backward", "optimizer")
MARK = "headroom::"


def parse_args(argv=None):
    p = argparse.ArgumentParser(
        description="Peak memory of one PyTorch CPU training step (Headroom reference).")
    p.add_argument("--model", default="resnet50",
                   help="torchvision classification model name (resnet50, resnet18, vgg16, "
                        "mobilenet_v2, ...)")
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--classes", type=int, default=1000)
    p.add_argument("--optimizer", choices=("sgd", "adam"), default="sgd")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--weight-decay", type=float, default=0.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--threads", type=int, default=0,
                   help="torch.set_num_threads (0: leave PyTorch's default)")
    p.add_argument("--no-mkldnn", action="store_true",
                   help="disable oneDNN (torch.backends.mkldnn.enabled = False)")
    p.add_argument("--no-saved", action="store_true",
                   help="skip counting autograd's saved tensors in the warm-up step")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    return p.parse_args(argv)


# ---------------------------------------------------------------------------------------
# Small helpers


def storage_key(t):
    """(address, bytes) of the storage behind tensor t."""
    s = t.storage()
    return (s.data_ptr(), s.nbytes())


def distinct_bytes(tensors):
    seen = {}
    for t in tensors:
        if t is None or t.device.type != "cpu":
            continue
        ptr, nbytes = storage_key(t)
        if nbytes:
            seen[ptr] = max(seen.get(ptr, 0), nbytes)
    return sum(seen.values()), set(seen)


def optimizer_state_tensors(opt):
    out = []
    for state in opt.state.values():
        for v in state.values():
            if torch.is_tensor(v):
                out.append(v)
    return out


def proc_status_kib(field):
    try:
        with open("/proc/self/status") as f:
            m = re.search(r"^%s:\s+(\d+) kB" % field, f.read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


def reset_peak_rss():
    """Reset the kernel's VmHWM to the current RSS (Linux >= 4.0). True when it worked."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def maxrss_bytes():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux: KiB


def build_model(name, classes):
    kwargs = {"weights": None, "num_classes": classes}
    if name in ("inception_v3", "googlenet"):
        kwargs["aux_logits"] = False
        kwargs["init_weights"] = True
    if hasattr(torchvision.models, "get_model"):
        try:
            return torchvision.models.get_model(name, **kwargs)
        except ValueError:
            pass
    fn = getattr(torchvision.models, name, None)
    if fn is None or not callable(fn):
        raise SystemExit("unknown torchvision model: %s" % name)
    return fn(**kwargs)


def logits_of(out):
    if torch.is_tensor(out):
        return out
    if hasattr(out, "logits"):
        return out.logits
    return out[0]


def train_step(model, opt, x, y, marks):
    """One training step; with marks, each phase is wrapped in a record_function."""
    def phase(name):
        return record_function(MARK + name) if marks else _Null()

    with phase("zero_grad"):
        opt.zero_grad(set_to_none=True)
    with phase("forward"):
        out = logits_of(model(x))
    with phase("loss"):
        loss = F.cross_entropy(out, y)
    del out
    with phase("backward"):
        loss.backward()
    with phase("optimizer"):
        opt.step()
    value = loss.item()
    del loss
    return value


class _Null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


# ---------------------------------------------------------------------------------------
# Reading the profiler


# tools/torch_reference.py's helpers, and aten::ones, which this script has always counted.
_ALLOC_HELPERS = ALLOCATION_HELPERS | {"aten::ones"}


def _op_label(e):
    """The op that asked for an allocation: its nearest ancestor that is not a plain
    allocation helper, with the autograd node (backward) or marker it runs under."""
    op, ctx, p = None, None, e.parent
    while p is not None:
        name = p.name
        if op is None and name not in _ALLOC_HELPERS:
            op = name
        if name.startswith("autograd::engine::evaluate_function: "):
            ctx = name[len("autograd::engine::evaluate_function: "):]
            break
        if name.startswith(MARK):
            ctx = ctx or name[len(MARK):]
            break
        p = p.parent
    if op is None:
        return ctx
    return op if ctx is None or ctx == op else "%s (%s)" % (op, ctx)


def allocation_stream(prof):
    """Returns (events, markers, method) where events is a time-ordered list of
    (t_ns, signed_bytes, total_allocated_or_None, op_name) and markers maps a phase name to
    (start_ns, end_ns)."""
    results = prof.profiler.kineto_results
    markers = {}
    if hasattr(results, "experimental_event_tree") and hasattr(torch._C, "_profiler") \
            and hasattr(torch._C._profiler, "_EventType"):
        alloc_tag = torch._C._profiler._EventType.Allocation
        evs = []
        for e in WalkEvents(results.experimental_event_tree()):
            if e.tag == alloc_tag:
                f = e.extra_fields
                if f.device.type != "cpu":
                    continue
                evs.append((e.start_time_ns, f.alloc_size, f.total_allocated,
                            _op_label(e) if f.alloc_size > 0 else None))
            elif e.name.startswith(MARK):
                markers[e.name[len(MARK):]] = (e.start_time_ns, e.end_time_ns)
        evs.sort(key=lambda r: r[0])
        return evs, markers, "profiler-allocator-counter"
    # Fallback: the flat event list, microsecond timestamps, no running total.
    evs = []
    for e in results.events():
        if e.name() == "[memory]":
            if e.device_type() == torch._C._autograd.DeviceType.CPU:
                evs.append((e.start_us() * 1000, e.nbytes(), None, None))
        elif e.name().startswith(MARK):
            s = e.start_us() * 1000
            markers[e.name()[len(MARK):]] = (s, s + e.duration_us() * 1000)
    evs.sort(key=lambda r: r[0])
    return evs, markers, "profiler-memory-events-us"


def analyse(evs, markers):
    """Running live bytes over the stream; peaks inside the step and inside each phase."""
    live = 0
    mismatches = 0
    timeline = []  # (t_ns, live_after_event, op)
    for t, nbytes, total, op in evs:
        live += nbytes
        if total is not None and total != live:
            mismatches += 1
            live = total  # trust the allocator's own counter
        timeline.append((t, live, op))

    def live_at(t_ns):
        """Live bytes just before time t_ns."""
        v = 0
        for t, l, _ in timeline:
            if t >= t_ns:
                break
            v = l
        return v

    def window(t0, t1):
        start = live_at(t0)
        peak, peak_op, end = start, None, start
        for t, l, op in timeline:
            if t0 <= t <= t1:
                end = l
                if l > peak:
                    peak, peak_op = l, op
        return {"start": start, "peak": peak, "end": end, "peak_op": peak_op}

    step0 = markers[PHASES[0]][0]
    step1 = markers[PHASES[-1]][1]
    out = {"step": window(step0, step1), "mismatches": mismatches}
    for ph in PHASES:
        out[ph] = window(*markers[ph])
    out["peak_phase"] = max(PHASES, key=lambda ph: out[ph]["peak"])
    return out


# ---------------------------------------------------------------------------------------


def make_training(args):
    """Returns (model, x, y, opt): the model in train mode, a batch from the seed and the
    optimizer."""
    model = build_model(args.model, args.classes)
    model.train()
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size, generator=gen)
    y = torch.randint(0, args.classes, (args.batch,), generator=gen, dtype=torch.int64)
    if args.optimizer == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum,
                              weight_decay=args.weight_decay)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    return model, x, y, opt


def persistent_sizes(model, x, y):
    """Returns the parameter count and the bytes of the parameters, buffers and inputs, with
    "persistent_ptrs", the storages they hold."""
    parameter_bytes, param_ptrs = distinct_bytes(list(model.parameters()))
    buffer_bytes, buffer_ptrs = distinct_bytes(list(model.buffers()))
    input_bytes, input_ptrs = distinct_bytes([x, y])
    return {"num_parameters": sum(p.numel() for p in model.parameters()),
            "parameter_bytes": parameter_bytes, "buffer_bytes": buffer_bytes,
            "input_bytes": input_bytes,
            "persistent_ptrs": param_ptrs | buffer_ptrs | input_ptrs}


def warmup_step(model, opt, x, y, persistent_ptrs):
    """Runs the warm-up step (it creates the optimizer state). Returns the bytes of the
    tensors autograd saved, split by whether they are in `persistent_ptrs`; None, without
    counting them, when persistent_ptrs is None."""
    if persistent_ptrs is None:
        train_step(model, opt, x, y, marks=False)
        return None
    packed = {}

    def pack(t):
        if t.device.type == "cpu":
            ptr, nbytes = storage_key(t)
            packed[ptr] = max(packed.get(ptr, 0), nbytes)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        train_step(model, opt, x, y, marks=False)
    return {
        "saved_tensor_bytes": sum(packed.values()),
        "saved_persistent_bytes": sum(v for k, v in packed.items() if k in persistent_ptrs),
        "saved_activation_bytes": sum(v for k, v in packed.items() if k not in persistent_ptrs),
        "saved_storages": len(packed),
    }


def baseline_sizes(model, opt, x, y):
    """Returns the bytes of the optimizer state, of the warm-up's gradients and of all that
    lives between steps (parameters, buffers, optimizer state, inputs)."""
    params = list(model.parameters())
    state_bytes, _ = distinct_bytes(optimizer_state_tensors(opt))
    grad_bytes_before, _ = distinct_bytes([p.grad for p in params])
    baseline_bytes, _ = distinct_bytes(params + list(model.buffers())
                                       + optimizer_state_tensors(opt) + [x, y])
    return {"optimizer_state_bytes": state_bytes, "grad_bytes_before": grad_bytes_before,
            "baseline_bytes": baseline_bytes}


def measured_step(model, opt, x, y):
    """Runs the measured step between markers; returns its loss, seconds, gradient bytes and
    the process's RSS around it."""
    m = {"maxrss_before": maxrss_bytes(), "hwm_reset": reset_peak_rss(),
         "rss_before": (proc_status_kib("VmRSS") or 0) * 1024}
    t_step = time.time()
    m["loss"] = train_step(model, opt, x, y, marks=True)
    m["step_seconds"] = time.time() - t_step
    m["hwm_after"] = (proc_status_kib("VmHWM") or 0) * 1024
    m["maxrss_after"] = maxrss_bytes()
    m["grad_bytes"], _ = distinct_bytes([p.grad for p in model.parameters()])
    return m


def method_description(method):
    """Returns how `method` (allocation_stream's) measures, in words."""
    if method == "profiler-allocator-counter":
        return ("torch.profiler.profile(profile_memory=True) open from before model construction "
                "to the end of the measured step; CPU allocation/free events from "
                "kineto_results.experimental_event_tree() (ns timestamps, signed size, "
                "allocator running total_allocated) sorted by time; peak_bytes = max "
                "total_allocated between the step's record_function markers; baseline_bytes = "
                "sum numel*element_size over distinct storages of parameters, buffers, "
                "optimizer state, inputs and labels (checked equal to the counter after "
                "zero_grad)")
    return "torch.profiler [memory] events (us timestamps), cumulative sum of signed sizes"


def make_result(args, sizes, m, a, run):
    """Returns the report: `sizes` from persistent_sizes() and baseline_sizes(), `m` from
    measured_step(), `a` from analyse(), and `run` (allocation_events, method,
    warmup_seconds, t_start)."""
    step = a["step"]
    live_after_zero_grad = a["zero_grad"]["end"]
    peak_bytes = step["peak"]
    baseline_bytes = sizes["baseline_bytes"]
    hwm_reset = m["hwm_reset"]
    maxrss_growth = m["maxrss_after"] - m["maxrss_before"]
    return {
        "framework": "pytorch",
        "torch_version": torch.__version__,
        "torchvision_version": torchvision.__version__,
        "device": "cpu",
        "threads": torch.get_num_threads(),
        "mkldnn": bool(torch.backends.mkldnn.enabled and torch.backends.mkldnn.is_available()),
        "model": args.model,
        "batch": args.batch,
        "image_size": args.image_size,
        "classes": args.classes,
        "optimizer": args.optimizer,
        "momentum": args.momentum if args.optimizer == "sgd" else None,
        "num_parameters": sizes["num_parameters"],
        "parameter_bytes": sizes["parameter_bytes"],
        "gradient_bytes": m["grad_bytes"],
        "optimizer_state_bytes": sizes["optimizer_state_bytes"],
        "buffer_bytes": sizes["buffer_bytes"],
        "input_bytes": sizes["input_bytes"],
        "baseline_bytes": baseline_bytes,
        "live_after_zero_grad_bytes": live_after_zero_grad,
        "baseline_check": "ok" if live_after_zero_grad == baseline_bytes else
                          "MISMATCH (allocator %d vs tensors %d)" % (live_after_zero_grad,
                                                                     baseline_bytes),
        "live_at_step_start_bytes": step["start"],
        "warmup_gradient_bytes_freed_by_zero_grad": sizes["grad_bytes_before"],
        "step_peak_above_baseline_bytes": peak_bytes - baseline_bytes,
        "peak_bytes": peak_bytes,
        "peak_phase": a["peak_phase"],
        "peak_op": step["peak_op"],
        "live_after_forward_bytes": a["forward"]["end"],
        "live_after_loss_bytes": a["loss"]["end"],
        "live_after_step_bytes": step["end"],
        "phase_peaks_bytes": {ph: a[ph]["peak"] for ph in PHASES},
        "rss_growth_bytes": (m["hwm_after"] - m["rss_before"]) if hwm_reset else maxrss_growth,
        "rss_growth_method": "VmHWM after (reset via /proc/self/clear_refs) - VmRSS before"
                             if hwm_reset else "ru_maxrss after - before",
        "ru_maxrss_growth_bytes": maxrss_growth,
        "ru_maxrss_bytes": m["maxrss_after"],
        "cpu_allocator_stats": "none in torch %s (torch.cuda.memory_stats is CUDA-only); the "
                               "profiler's total_allocated is c10's CPU allocator counter"
                               % torch.__version__,
        "allocation_events": run["allocation_events"],
        "counter_mismatches": a["mismatches"],
        "method": method_description(run["method"]),
        "method_id": run["method"],
        "loss": m["loss"],
        "step_seconds": round(m["step_seconds"], 3),
        "warmup_seconds": round(run["warmup_seconds"], 3),
        "seconds": round(time.time() - run["t_start"], 3),
    }


def main(argv=None):
    args = parse_args(argv)
    t_start = time.time()
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.no_mkldnn:
        torch.backends.mkldnn.enabled = False
    torch.manual_seed(args.seed)

    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                   record_shapes=False, with_stack=False)
    prof.__enter__()
    try:
        # The run's tensors stay referenced here until the profiler closes.
        model, x, y, opt = make_training(args)
        sizes = persistent_sizes(model, x, y)
        t_warm = time.time()
        saved = warmup_step(model, opt, x, y,
                            None if args.no_saved else sizes["persistent_ptrs"])
        warmup_seconds = time.time() - t_warm
        sizes.update(baseline_sizes(model, opt, x, y))
        gc.collect()
        m = measured_step(model, opt, x, y)
    finally:
        prof.__exit__(None, None, None)

    evs, markers, method = allocation_stream(prof)
    result = make_result(args, sizes, m, analyse(evs, markers),
                         {"allocation_events": len(evs), "method": method,
                          "warmup_seconds": warmup_seconds, "t_start": t_start})
    if saved is not None:
        result.update(saved)
    num_parameters = sizes["num_parameters"]
    expected = KNOWN_PARAMETERS.get(args.model) if args.classes == 1000 else None
    if expected is not None:
        result["num_parameters_expected"] = expected
        if num_parameters != expected:
            print("error: %s has %d parameters, torchvision's is %d"
                  % (args.model, num_parameters, expected), file=sys.stderr)
            return 1

    if args.json:
        print(json.dumps(result))
    else:
        print_table(result)
    return 0


def mib(n):
    return "%.1f MiB" % (n / 2**20)


def print_table(r):
    rows = [
        ("model", "%s  batch %d  %dx%d  %d classes" % (r["model"], r["batch"], r["image_size"],
                                                      r["image_size"], r["classes"])),
        ("pytorch", "torch %s  torchvision %s  cpu threads %d  oneDNN %s"
         % (r["torch_version"], r["torchvision_version"], r["threads"],
            "on" if r["mkldnn"] else "off")),
        ("optimizer", r["optimizer"] + ("  momentum %g" % r["momentum"]
                                        if r["momentum"] is not None else "")),
        ("parameters", "{:,}".format(r["num_parameters"])),
        ("parameter bytes", "{:,}  ({})".format(r["parameter_bytes"], mib(r["parameter_bytes"]))),
        ("gradient bytes", "{:,}".format(r["gradient_bytes"])),
        ("optimizer state bytes", "{:,}".format(r["optimizer_state_bytes"])),
        ("buffer bytes", "{:,}".format(r["buffer_bytes"])),
        ("input+label bytes", "{:,}".format(r["input_bytes"])),
        ("baseline bytes", "{:,}  ({})  check: {}".format(r["baseline_bytes"],
                                                          mib(r["baseline_bytes"]),
                                                          r["baseline_check"])),
        ("live after forward", "{:,}  ({})".format(r["live_after_forward_bytes"],
                                                 mib(r["live_after_forward_bytes"]))),
    ]
    for ph, v in r["phase_peaks_bytes"].items():
        rows.append(("  peak in " + ph, "{:,}  ({})".format(v, mib(v))))
    rows += [
        ("PEAK bytes", "{:,}  ({})  in {} at {}".format(r["peak_bytes"], mib(r["peak_bytes"]),
                                                        r["peak_phase"], r["peak_op"])),
        ("peak above baseline", "{:,}  ({})".format(r["step_peak_above_baseline_bytes"],
                                                  mib(r["step_peak_above_baseline_bytes"]))),
        ("rss growth", "{:,}  ({})  [{}]".format(r["rss_growth_bytes"],
                                                 mib(r["rss_growth_bytes"]),
                                                 r["rss_growth_method"])),
        ("ru_maxrss growth", "{:,}".format(r["ru_maxrss_growth_bytes"])),
    ]
    if "saved_tensor_bytes" in r:
        rows.append(("saved for backward", "{:,} activations + {:,} persistent ({} storages)"
                     .format(r["saved_activation_bytes"], r["saved_persistent_bytes"],
                             r["saved_storages"])))
    rows += [
        ("allocation events", "{:,}  (counter mismatches {})".format(r["allocation_events"],
                                                                     r["counter_mismatches"])),
        ("method", r["method_id"]),
        ("time", "step %.2f s (profiled)  warm-up %.2f s  total %.2f s"
         % (r["step_seconds"], r["warmup_seconds"], r["seconds"])),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        print("%-*s  %s" % (w, k, v))


if __name__ == "__main__":
    sys.exit(main())
