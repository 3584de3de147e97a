"""Tests of headroom_client against an in-process fake Headroom service on a free port."""

import collections
import concurrent.futures
import contextlib
import importlib.util
import io
import os
import tempfile
import threading
import unittest

import grpc

from headroom_client import (Client, HeadroomError, format_bytes, model_source, onnx, parse_bytes,
                             pb, read_graph, write_graph, zoo)
from headroom_client.protos import pb_grpc

MiB = 1024 * 1024


def _progress(state, step, loss, peak):
    return pb.JobProgress(
        job_id="job-1", state=state, step=step, total_steps=3, loss=loss,
        memory_by_role=[pb.RoleBytes(role=pb.ROLE_PARAMETER, bytes=10 * MiB),
                        pb.RoleBytes(role=pb.ROLE_ACTIVATION, bytes=step * MiB)],
        measured_peak_bytes=peak)


class FakeHeadroom(pb_grpc.HeadroomServicer):
    """Records every request; answers from canned data. Job "job-1" exists and streams
    PROGRESS; "endless" streams until the client goes away; others are NOT_FOUND."""

    PROGRESS = [
        _progress(pb.JOB_STATE_QUEUED, 0, 0.0, 0),
        _progress(pb.JOB_STATE_RUNNING, 1, 2.5, 40 * MiB),
        _progress(pb.JOB_STATE_RUNNING, 2, 2.25, 41 * MiB),
        _progress(pb.JOB_STATE_SUCCEEDED, 3, 2.0, 42 * MiB),
    ]
    # ListJobs pages by token: jobs job-1..job-5 over three pages.
    PAGES = {"": (["job-1", "job-2"], "p2"), "p2": (["job-3", "job-4"], "p3"),
             "p3": (["job-5"], "")}
    SMALLEST_BUDGET = 100 * MiB

    def __init__(self):
        self.requests = collections.defaultdict(list)
        self.endless_cancelled = threading.Event()
        # UploadJob answers UNIMPLEMENTED, as a daemon that predates it.
        self.upload_unimplemented = False

    def Plan(self, request, context):
        self.requests["Plan"].append(request)
        if 0 < request.options.budget_bytes < self.SMALLEST_BUDGET:
            context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                          f"budget {request.options.budget_bytes} B is infeasible; the smallest "
                          f"feasible budget is {self.SMALLEST_BUDGET} B")
        return pb.PlanResponse(
            summary=pb.PlanSummary(budget_bytes=request.options.budget_bytes,
                                   predicted_peak_bytes=90 * MiB, predicted_step_seconds=0.5),
            sections=[pb.Section(index=0), pb.Section(index=1)])

    def Profile(self, request, context):
        self.requests["Profile"].append(request)
        return pb.ProfileResponse(measured_peak_bytes=77, backend="cpu")

    def SubmitJob(self, request, context):
        self.requests["SubmitJob"].append(request)
        return pb.SubmitJobResponse(job_id="job-1", state=pb.JOB_STATE_QUEUED)

    def WatchJob(self, request, context):
        self.requests["WatchJob"].append(request)
        if request.job_id == "endless":
            context.add_callback(self.endless_cancelled.set)
            step = 0
            while context.is_active():
                step += 1
                yield _progress(pb.JOB_STATE_RUNNING, step, 1.0, MiB)
            return
        if request.job_id != "job-1":
            context.abort(grpc.StatusCode.NOT_FOUND, f"no job '{request.job_id}'")
        yield from self.PROGRESS

    def UploadJob(self, request_iterator, context):
        messages = list(request_iterator)
        self.requests["UploadJob"].append(messages)
        if self.upload_unimplemented:
            context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not implemented!")
        return pb.SubmitJobResponse(job_id="job-2", state=pb.JOB_STATE_QUEUED)

    def CancelJob(self, request, context):
        self.requests["CancelJob"].append(request)
        return pb.CancelJobResponse(state=pb.JOB_STATE_CANCELLED)

    def ListJobs(self, request, context):
        self.requests["ListJobs"].append(request)
        ids, next_token = self.PAGES[request.page_token]
        return pb.ListJobsResponse(jobs=[pb.JobInfo(job_id=i) for i in ids],
                                   next_page_token=next_token)

    def GetTimeline(self, request, context):
        self.requests["GetTimeline"].append(request)
        return pb.GetTimelineResponse(
            job_id=request.job_id,
            timeline=pb.MemoryTimeline(peak_bytes=42 * MiB, peak_step=2, peak_node="fc"))

    def ListProfiles(self, request, context):
        self.requests["ListProfiles"].append(request)
        return pb.ListProfilesResponse(profiles=[pb.StoredProfile(profile_id="p-2"),
                                                 pb.StoredProfile(profile_id="p-1")])


class ClientTest(unittest.TestCase):

    def setUp(self):
        self.fake = FakeHeadroom()
        self.server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=4))
        pb_grpc.add_HeadroomServicer_to_server(self.fake, self.server)
        port = self.server.add_insecure_port("127.0.0.1:0")
        self.server.start()
        self.address = f"127.0.0.1:{port}"
        self.client = Client(self.address, timeout=10)

    def tearDown(self):
        self.client.close()
        self.server.stop(grace=None)

    def test_submit_sends_the_job_spec(self):
        response = self.client.submit(zoo("resnet18", batch=8, image_size=64), steps=5,
                                      budget_bytes="400MiB", name="r18", seed=7,
                                      checkpoint_every=2, optimizer="adam", device="h100")
        expected = pb.JobSpec(
            name="r18",
            model=pb.ModelSource(zoo=pb.ZooModel(name="resnet18", batch=8,
                                                 options={"image_size": 64})),
            plan=pb.PlanOptions(budget_bytes=400 * MiB,
                                optimizer=pb.Optimizer(kind=pb.Optimizer.KIND_ADAM),
                                device=pb.DeviceModel(preset="h100")),
            train=pb.TrainOptions(steps=5, seed=7, checkpoint_interval_steps=2))
        [request] = self.fake.requests["SubmitJob"]
        self.assertEqual(request.spec, expected, f"sent:\n{request.spec}\nwanted:\n{expected}")
        self.assertEqual(response.job_id, "job-1")
        self.assertEqual(response.state, pb.JOB_STATE_QUEUED)

    def test_submit_with_ranks_sends_them_with_the_bucket_size_and_sync_batchnorm(self):
        self.client.submit(zoo("small_cnn", batch=8), steps=5, ranks=2, bucket_bytes="4MiB",
                           sync_batchnorm=True)
        [request] = self.fake.requests["SubmitJob"]
        self.assertEqual(request.spec.ranks, 2)
        self.assertEqual(request.spec.plan.data_parallel,
                         pb.DataParallelOptions(bucket_bytes=4 * MiB, sync_batch_norm=True))
        for kwargs in ({"bucket_bytes": 1024}, {"sync_batchnorm": True}):
            with self.assertRaisesRegex(ValueError, "needs ranks above 1, not 1"):
                self.client.submit(zoo("small_cnn", batch=8), **kwargs)
        self.assertEqual(len(self.fake.requests["SubmitJob"]), 1)

    def test_submit_sends_a_dataset_jobs_data_options_without_steps(self):
        self.client.submit(zoo("small_cnn", batch=32), seed=3,
                           data={"dataset": "fashion-mnist", "epochs": 5, "eval_every": 1,
                                 "lr_schedule": "cosine", "validation_fraction": 0.1})
        [request] = self.fake.requests["SubmitJob"]
        self.assertEqual(request.spec.data, pb.DataOptions(
            dataset="fashion-mnist", epochs=5, eval_every=1, lr_schedule="cosine",
            validation_fraction=0.1))
        self.assertEqual(request.spec.train.steps, 0, "the epochs decide the steps")
        self.assertEqual(request.spec.train.seed, 3)

    def test_submit_streams_an_onnx_model_in_chunks(self):
        model = bytes(i * 7919 % 251 for i in range(1300 * 1024))
        response = self.client.submit(onnx(model, batch=2, classes=10), steps=3, name="up")
        self.assertEqual(response.job_id, "job-2")
        self.assertNotIn("SubmitJob", self.fake.requests)
        [messages] = self.fake.requests["UploadJob"]
        head, chunks = messages[0], messages[1:]
        self.assertEqual(head.WhichOneof("part"), "spec")
        self.assertEqual(head.onnx_model_bytes, len(model))
        self.assertEqual(head.spec.model, pb.ModelSource(onnx=pb.OnnxImport(
            batch=2, loss="softmax_cross_entropy", classes=10)), "the bytes travel as chunks")
        self.assertEqual(head.spec.name, "up")
        self.assertEqual(head.spec.train.steps, 3)
        self.assertEqual([len(c.onnx_model_chunk) for c in chunks],
                         [512 * 1024, 512 * 1024, 276 * 1024])
        self.assertTrue(b"".join(c.onnx_model_chunk for c in chunks) == model)

    def test_submit_of_an_onnx_model_to_a_daemon_without_upload_sends_it_whole(self):
        self.fake.upload_unimplemented = True
        response = self.client.submit(onnx(b"tiny model", batch=2), steps=1)
        self.assertEqual(response.job_id, "job-1")
        [request] = self.fake.requests["SubmitJob"]
        self.assertEqual(request.spec.model.onnx_model, b"tiny model")

    def test_submit_a_graph(self):
        graph = pb.GraphDef(name="tiny", loss="loss")
        self.client.submit(graph, steps=1)
        [request] = self.fake.requests["SubmitJob"]
        self.assertEqual(request.spec.model, pb.ModelSource(graph=graph))
        self.assertEqual(request.spec.train.seed, 1)

    def test_plan_sends_options(self):
        plan = self.client.plan(zoo("mlp", batch=4), budget_bytes="1.5GB", frontier=True)
        [request] = self.fake.requests["Plan"]
        self.assertEqual(request.model.zoo.name, "mlp")
        self.assertEqual(request.options.budget_bytes, 1_500_000_000)
        self.assertTrue(request.options.frontier)
        self.assertEqual(request.options.device.preset, "cpu")
        self.assertEqual(plan.summary.predicted_peak_bytes, 90 * MiB)
        self.assertEqual(len(plan.sections), 2)

    def test_watch_yields_every_streamed_message(self):
        got = list(self.client.watch("job-1"))
        self.assertEqual(got, FakeHeadroom.PROGRESS)

    def test_wait_returns_the_last_message_and_reports_each(self):
        seen = []
        final = self.client.wait("job-1", on_progress=seen.append)
        self.assertEqual(seen, FakeHeadroom.PROGRESS)
        self.assertEqual(final.state, pb.JOB_STATE_SUCCEEDED)
        self.assertEqual(final.step, 3)

    def test_closing_a_watch_early_cancels_the_stream(self):
        watch = self.client.watch("endless")
        self.assertEqual(next(watch).step, 1)
        watch.close()
        self.assertTrue(self.fake.endless_cancelled.wait(10),
                        "the server never saw the watch cancelled")

    def test_jobs_follows_page_tokens(self):
        jobs = self.client.jobs(states=["RUNNING", pb.JOB_STATE_QUEUED], page_size=2)
        self.assertEqual([j.job_id for j in jobs], ["job-1", "job-2", "job-3", "job-4", "job-5"])
        requests = self.fake.requests["ListJobs"]
        self.assertEqual([r.page_token for r in requests], ["", "p2", "p3"])
        for r in requests:
            self.assertEqual(list(r.states), [pb.JOB_STATE_RUNNING, pb.JOB_STATE_QUEUED])
            self.assertEqual(r.page_size, 2)

    def test_jobs_rejects_an_unknown_state(self):
        with self.assertRaisesRegex(ValueError, "unknown job state 'sleeping'; one of "):
            self.client.jobs(states=["sleeping"])

    def test_cancel_timeline_profile_and_profiles(self):
        self.assertEqual(self.client.cancel("job-1"), pb.JOB_STATE_CANCELLED)
        timeline = self.client.timeline("job-1", max_samples=50)
        self.assertEqual(timeline.peak_bytes, 42 * MiB)
        [request] = self.fake.requests["GetTimeline"]
        self.assertEqual((request.job_id, request.max_samples), ("job-1", 50))
        self.assertEqual(self.client.profile(zoo("mlp"), steps=2).measured_peak_bytes, 77)
        [request] = self.fake.requests["Profile"]
        self.assertEqual((request.steps, request.seed), (2, 1))
        self.assertEqual([p.profile_id for p in self.client.profiles()], ["p-2", "p-1"])

    def test_errors_become_headroom_error_with_the_code(self):
        with self.assertRaises(HeadroomError) as caught:
            self.client.plan(zoo("resnet18"), budget_bytes="10MiB")
        self.assertEqual(caught.exception.code, "FAILED_PRECONDITION")
        self.assertIn("smallest feasible budget is 104857600 B", caught.exception.message)
        self.assertTrue(str(caught.exception).startswith("FAILED_PRECONDITION: "))

        with self.assertRaises(HeadroomError) as caught:
            list(self.client.watch("job-404"))
        self.assertEqual(caught.exception.code, "NOT_FOUND")
        self.assertEqual(caught.exception.message, "no job 'job-404'")

    def test_an_unreachable_daemon_is_unavailable(self):
        self.server.stop(grace=None)
        with Client(self.address, timeout=5) as client:
            with self.assertRaises(HeadroomError) as caught:
                client.cancel("job-1")
        self.assertIn(caught.exception.code, ("UNAVAILABLE", "DEADLINE_EXCEEDED"))

    def test_example_runs_to_the_end(self):
        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "examples",
                            "submit_and_watch.py")
        spec = importlib.util.spec_from_file_location("submit_and_watch", path)
        example = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(example)
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            code = example.main(["--server", self.address, "--model", "resnet18", "--batch",
                                 "4", "--budget", "200MiB", "--steps", "3"])
        print(out.getvalue())
        self.assertEqual(code, 0)
        self.assertIn("step 3/3  loss 2.0000", out.getvalue())
        self.assertIn("timeline peak: 42.00 MiB at step 2 in 'fc'", out.getvalue())
        self.assertEqual(self.fake.requests["SubmitJob"][0].spec.train.steps, 3)


class HelpersTest(unittest.TestCase):

    def test_parse_bytes(self):
        cases = {"400MiB": 400 * MiB, "400M": 400 * MiB, "1.5GB": 1_500_000_000,
                 "64k": 65536, " 2 GiB ": 2 << 30, "4096": 4096, "7b": 7, 12: 12,
                 "1TB": 10**12}
        for text, want in cases.items():
            self.assertEqual(parse_bytes(text), want, f"parse_bytes({text!r})")
        for bad in ("", "MiB", "12XB", "1.2.3G", -1, True, None, "1e3"):
            with self.assertRaises(ValueError, msg=f"parse_bytes({bad!r})"):
                parse_bytes(bad)

    def test_format_bytes(self):
        self.assertEqual(format_bytes(512), "512 B")
        self.assertEqual(format_bytes(1536), "1.50 KiB")
        self.assertEqual(format_bytes(3 << 40), "3.00 TiB")

    def test_zoo_and_model_source(self):
        source = zoo("transformer", batch=2, layers=4)
        self.assertEqual(source.zoo.options["layers"], 4)
        with self.assertRaisesRegex(TypeError, "zoo options are integers"):
            zoo("mlp", width=1.5)
        self.assertEqual(model_source(source.zoo), source)
        with self.assertRaisesRegex(TypeError, "not str"):
            model_source("resnet18")

    def test_onnx_carries_the_bytes_and_the_import_options(self):
        source = onnx(b"\x08\x07", batch=8, classes=10)
        self.assertEqual(source.WhichOneof("source"), "onnx_model")
        self.assertEqual(source.onnx_model, b"\x08\x07")
        self.assertEqual((source.onnx.batch, source.onnx.loss, source.onnx.classes),
                         (8, "softmax_cross_entropy", 10))
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "m.onnx")
            with open(path, "wb") as f:
                f.write(b"model")
            self.assertEqual(onnx(path).onnx_model, b"model")
        with self.assertRaisesRegex(TypeError, "not int"):
            onnx(7)

    def test_graph_files_round_trip(self):
        graph = pb.GraphDef(name="g", loss="loss",
                            tensors=[pb.TensorDef(name="x", shape=[2, 3],
                                                  dtype=pb.DTYPE_FLOAT32, role=pb.ROLE_INPUT)])
        with tempfile.TemporaryDirectory() as tmp:
            for name in ("g.pb", "g.pbtxt"):
                path = os.path.join(tmp, name)
                write_graph(graph, path)
                self.assertEqual(read_graph(path), graph, name)
            with open(os.path.join(tmp, "g.pbtxt")) as f:
                self.assertIn('name: "g"', f.read())


if __name__ == "__main__":
    unittest.main()
