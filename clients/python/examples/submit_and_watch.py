#!/usr/bin/python3
"""Plans a zoo model under a budget on headroomd, trains it as a job, and follows it.

    PYTHONPATH=clients/python /usr/bin/python3 clients/python/examples/submit_and_watch.py \
        --server 127.0.0.1:50051 --model resnet18 --batch 16 --budget 400MiB --steps 20

Prints the plan's predicted peak, each step's loss and device memory as the job runs, and
the peak of the job's measured memory timeline. Exits 1 unless the job succeeds.
"""

import argparse
import sys

from headroom_client import Client, HeadroomError, format_bytes, pb, zoo


def parse_args(argv):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--server", default="127.0.0.1:50051", help="headroomd's address")
    parser.add_argument("--model", default="resnet18", help="a zoo model (`headroom zoo`)")
    parser.add_argument("--batch", type=int, default=16, help="samples per step")
    parser.add_argument("--budget", default="0",
                        help="peak device memory allowed, e.g. 400MiB (0: no budget)")
    parser.add_argument("--steps", type=int, default=20, help="training steps")
    return parser.parse_args(argv)


def print_progress(progress):
    """Prints one line per JobProgress: state, step, loss and device memory in use."""
    in_use = sum(r.bytes for r in progress.memory_by_role)
    print(f"  {pb.JobState.Name(progress.state):<20} step {progress.step}/"
          f"{progress.total_steps}  loss {progress.loss:.4f}  memory {format_bytes(in_use)}  "
          f"peak {format_bytes(progress.measured_peak_bytes)}")


def main(argv=None):
    args = parse_args(argv)
    model = zoo(args.model, batch=args.batch)
    with Client(args.server) as client:
        try:
            plan = client.plan(model, budget_bytes=args.budget)
            print(f"plan: {args.model} batch {args.batch} peaks at "
                  f"{format_bytes(plan.summary.predicted_peak_bytes)} with "
                  f"{len(plan.sections)} section(s), "
                  f"{plan.summary.predicted_step_seconds:.3f} s/step predicted")
            job = client.submit(model, budget_bytes=args.budget, steps=args.steps,
                                name=f"{args.model}-example")
            print(f"job {job.job_id}: {pb.JobState.Name(job.state)}")
            final = client.wait(job.job_id, on_progress=print_progress)
            timeline = client.timeline(job.job_id)
        except HeadroomError as err:
            print(f"headroom: {err}", file=sys.stderr)
            return 1
    print(f"timeline peak: {format_bytes(timeline.peak_bytes)} at step {timeline.peak_step} "
          f"in '{timeline.peak_node}' (planned {format_bytes(plan.summary.predicted_peak_bytes)})")
    if final.state != pb.JOB_STATE_SUCCEEDED:
        print(f"job {job.job_id} ended {pb.JobState.Name(final.state)}: {final.message}",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
