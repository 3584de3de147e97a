"""The Python client against a real headroomd (python_client_test.sh starts it).

    python_client_test.py --server HOST:PORT

Plans, submits and follows a zoo job, lists it, reads its timeline, checks a too-small
budget's error, plans (and trains) a PyTorch module converted with
headroom_client.torch_graph over the wire, and the same module sent as ONNX bytes. Exits 1
listing every failed check.
"""

import argparse
import sys
import time

from headroom_client import Client, HeadroomError, format_bytes, onnx, pb, zoo

failures = []


def check(condition, what):
    print(("ok    " if condition else "FAIL  ") + what)
    if not condition:
        failures.append(what)
    return condition


def expect_error(code, call, what):
    try:
        call()
    except HeadroomError as err:
        check(err.code == code, f"{what}: HeadroomError {err.code} (want {code}): {err.message}")
        return err
    check(False, f"{what}: no HeadroomError (want {code})")
    return None


def follow(client, job_id, total, what):
    """Watches job `job_id` to its end; checks its steps and final state."""
    steps = []
    states = []
    for progress in client.watch(job_id, timeout=600):
        steps.append(progress.step)
        states.append(progress.state)
    print(f"      {what}: {len(steps)} progress messages, steps {steps[:3]} .. {steps[-3:]}")
    check(bool(steps), f"{what}: watch() yielded progress")
    if not steps:
        return None
    check(all(a <= b for a, b in zip(steps, steps[1:])), f"{what}: steps never go back")
    # A short job may have run its last step before the watch starts (its first update is
    # then the last step, RUNNING or already SUCCEEDED); only a watch that began earlier can
    # see the steps increase.
    if steps[0] < total:
        check(len(set(steps)) > 1 and steps[-1] > steps[0], f"{what}: steps increase")
    check(states[-1] == pb.JOB_STATE_SUCCEEDED,
          f"{what}: ends {pb.JobState.Name(states[-1])} (want JOB_STATE_SUCCEEDED)")
    check(steps[-1] == total, f"{what}: last step {steps[-1]} == total {total}")
    # wait() on an ended job returns its final progress at once.
    final = client.wait(job_id, timeout=60)
    check(final.state == pb.JOB_STATE_SUCCEEDED and final.step == total == final.total_steps,
          f"{what}: wait() after the end: {pb.JobState.Name(final.state)} "
          f"step {final.step}/{final.total_steps}")
    return final


def check_plans(client, model, budget):
    """Plans `model` unconstrained and under `budget` (48 MiB); returns the budget's plan."""
    # 1. Plan a zoo model.
    unconstrained = client.plan(model)
    peak = unconstrained.summary.predicted_peak_bytes
    check(peak > 0, f"plan(mlp batch 8): unconstrained peak {format_bytes(peak)}")
    plan = client.plan(model, budget_bytes=budget)
    check(0 < plan.summary.predicted_peak_bytes <= 48 << 20,
          f"plan(mlp, {budget}): peak {format_bytes(plan.summary.predicted_peak_bytes)}, "
          f"{len(plan.sections)} section(s)")
    return plan


def check_job(client, model, plan, budget, total):
    """Submits `total` steps of `model` under `budget`, follows them, and checks the job is
    listed, filtered by state and has a timeline."""
    # 2. Submit ~50 steps and follow them.
    job = client.submit(model, budget_bytes=budget, steps=total, name="python-client")
    check(job.job_id != "", f"submit(): job {job.job_id}, {pb.JobState.Name(job.state)}")
    check(job.state in (pb.JOB_STATE_QUEUED, pb.JOB_STATE_RUNNING),
          f"submit(): state {pb.JobState.Name(job.state)} is queued or running")
    check(job.plan.summary.predicted_peak_bytes == plan.summary.predicted_peak_bytes,
          "submit(): the job's plan is plan()'s")
    follow(client, job.job_id, total, f"job {job.job_id}")
    # 3. It is listed, and has a timeline.
    jobs = {j.job_id: j for j in client.jobs()}
    info = jobs.get(job.job_id)
    if check(info is not None, f"jobs() lists {job.job_id} (of {len(jobs)})"):
        check(info.state == pb.JOB_STATE_SUCCEEDED and info.step == total
              and info.total_steps == total and info.name == "python-client",
              f"jobs(): {job.job_id} {pb.JobState.Name(info.state)} "
              f"{info.step}/{info.total_steps} '{info.name}'")
        check(0 < info.measured_peak_bytes, f"jobs(): measured peak "
              f"{format_bytes(info.measured_peak_bytes)}, planned "
              f"{format_bytes(info.planned_peak_bytes)}")
    succeeded = [j.job_id for j in client.jobs(states=["SUCCEEDED"])]
    check(job.job_id in succeeded, "jobs(states=['SUCCEEDED']) lists it")
    check(job.job_id not in [j.job_id for j in client.jobs(states=["RUNNING", "QUEUED"])],
          "jobs(states=['RUNNING', 'QUEUED']) does not")
    timeline = client.timeline(job.job_id)
    check(len(timeline.samples) > 0 and timeline.peak_bytes > 0,
          f"timeline(): {len(timeline.samples)} samples, peak "
          f"{format_bytes(timeline.peak_bytes)} at '{timeline.peak_node}'")
    # Thinned: at most 10 samples, the peak's among them.
    thinned = client.timeline(job.job_id, max_samples=10)
    check(0 < len(thinned.samples) <= 10 and
          max(s.device_bytes for s in thinned.samples) == timeline.peak_bytes,
          f"timeline(max_samples=10): {len(thinned.samples)} samples, the peak's kept")


def check_errors(client, model):
    """The daemon's errors keep their status codes."""
    # 4. Errors.
    expect_error("FAILED_PRECONDITION", lambda: client.plan(model, budget_bytes="1KiB"),
                 "plan() under 1 KiB")
    expect_error("FAILED_PRECONDITION",
                 lambda: client.submit(model, budget_bytes="1KiB", steps=5),
                 "submit() under 1 KiB")
    expect_error("NOT_FOUND", lambda: client.timeline("no-such-job"), "timeline() of no job")
    expect_error("NOT_FOUND", lambda: list(client.watch("no-such-job", timeout=60)),
                 "watch() of no job")


def check_torch_module(client):
    """A PyTorch module, converted and planned and trained over the wire; returns it."""
    # 5. A PyTorch module, converted and planned (and trained) over the wire.
    import torch
    from headroom_client.torch_graph import graph_from_module

    torch.manual_seed(0)
    module = torch.nn.Sequential(
        torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 32),
        torch.nn.ReLU(), torch.nn.Linear(32, 4))
    graph = graph_from_module(module, torch.randn(8, 16), name="tiny", classes=4)
    check(isinstance(graph, pb.GraphDef) and len(graph.nodes) > 0,
          f"graph_from_module(): {len(graph.nodes)} nodes")
    torch_plan = client.plan(graph)
    check(torch_plan.summary.predicted_peak_bytes > 0,
          f"plan(GraphDef): peak {format_bytes(torch_plan.summary.predicted_peak_bytes)}, "
          f"{len(torch_plan.sections)} section(s)")
    expect_error("FAILED_PRECONDITION", lambda: client.plan(graph, budget_bytes=64),
                 "plan(GraphDef) under 64 B")
    torch_job = client.submit(graph, steps=5, name="torch-graph")
    follow(client, torch_job.job_id, 5, f"GraphDef job {torch_job.job_id}")
    return module


def check_onnx(client, module):
    """The same module as ONNX bytes, imported by the daemon."""
    import torch
    # 6. The same module as ONNX bytes, imported by the daemon: the same parameters, and a
    #    job that trains from the module's own weights.
    import io
    buffer = io.BytesIO()
    x = torch.randn(8, 16)
    torch.onnx.export(module.train(), x, buffer, input_names=["x"], output_names=["logits"],
                      dynamic_axes={"x": {0: "batch"}, "logits": {0: "batch"}},
                      opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
                      do_constant_folding=False)
    source = onnx(buffer.getvalue(), batch=8, classes=4)
    onnx_plan = client.plan(source)
    check(onnx_plan.summary.predicted_peak_bytes > 0,
          f"plan(onnx(...)): peak {format_bytes(onnx_plan.summary.predicted_peak_bytes)}")
    params = dict((r.role, r.bytes) for r in onnx_plan.summary.bytes_by_role)
    module_bytes = 4 * sum(p.numel() for p in module.parameters())
    check(params.get(pb.ROLE_PARAMETER) == module_bytes,
          f"plan(onnx(...)): parameters {params.get(pb.ROLE_PARAMETER)} B == the module's "
          f"{module_bytes} B")
    expect_error("INVALID_ARGUMENT", lambda: client.plan(onnx(b"no model", batch=8)),
                 "plan() of bytes that are no ONNX model")
    onnx_job = client.submit(source, steps=20, name="onnx", seed=5)
    follow(client, onnx_job.job_id, 20, f"ONNX job {onnx_job.job_id}")


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--server", required=True)
    args = parser.parse_args(argv)
    started = time.monotonic()

    with Client(args.server, timeout=120) as client:
        model = zoo("mlp", batch=8)
        budget = "48MiB"
        plan = check_plans(client, model, budget)
        check_job(client, model, plan, budget, total=50)
        check_errors(client, model)
        module = check_torch_module(client)
        check_onnx(client, module)

    print(f"{time.monotonic() - started:.1f} s")
    if failures:
        print("FAIL:\n  " + "\n  ".join(failures))
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
