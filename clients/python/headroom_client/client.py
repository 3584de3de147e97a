"""Client: headroomd's Headroom service as Python methods."""

import grpc

from headroom_client.errors import HeadroomError
from headroom_client.models import model_source
from headroom_client.protos import pb, pb_grpc
from headroom_client.sizes import parse_bytes

# Timelines and profiles with every sample can be large; the gRPC default is 4 MiB.
_MAX_MESSAGE_BYTES = 256 * 1024 * 1024

# submit() streams an ONNX model through UploadJob in chunks of this size: below any
# --max-message-bytes a daemon is likely to have (headroomd takes chunks of up to 4 MiB).
UPLOAD_CHUNK_BYTES = 512 * 1024

_OPTIMIZERS = {
    "sgd": pb.Optimizer.KIND_SGD_MOMENTUM,
    "sgd_momentum": pb.Optimizer.KIND_SGD_MOMENTUM,
    "adam": pb.Optimizer.KIND_ADAM,
}


def _job_state(state):
    """Returns the JobState value of an int or a name ("RUNNING", "JOB_STATE_RUNNING")."""
    if isinstance(state, int):
        return state
    name = str(state).upper()
    if not name.startswith("JOB_STATE_"):
        name = "JOB_STATE_" + name
    try:
        return pb.JobState.Value(name)
    except ValueError:
        raise ValueError(f"unknown job state {state!r}; one of "
                         f"{', '.join(pb.JobState.keys()[1:])}") from None


def _optimizer(optimizer):
    """Returns an Optimizer message for None (the daemon's default), "sgd", "adam" or an
    Optimizer."""
    if optimizer is None:
        return pb.Optimizer()
    if isinstance(optimizer, pb.Optimizer):
        return optimizer
    kind = _OPTIMIZERS.get(str(optimizer).lower())
    if kind is None:
        raise ValueError(f"unknown optimizer {optimizer!r}; one of {', '.join(_OPTIMIZERS)}")
    return pb.Optimizer(kind=kind)


def _device(device):
    """Returns a DeviceModel for a preset name ("cpu", "h100", "h200") or a DeviceModel."""
    if isinstance(device, pb.DeviceModel):
        return device
    return pb.DeviceModel(preset=device or "")


def plan_options(budget_bytes=0, frontier=False, device="cpu", inference=False,
                 optimizer=None, disable_offload=False, alignment_bytes=0):
    """Returns PlanOptions; sizes may be ints or strings such as "400MiB"."""
    return pb.PlanOptions(
        budget_bytes=parse_bytes(budget_bytes),
        inference=inference,
        optimizer=_optimizer(optimizer),
        alignment_bytes=parse_bytes(alignment_bytes),
        frontier=frontier,
        disable_offload=disable_offload,
        device=_device(device),
    )


def _read_pem(tls_ca):
    """Returns the PEM bytes of `tls_ca`: bytes as given, else the file at that path."""
    if isinstance(tls_ca, bytes):
        return tls_ca
    with open(tls_ca, "rb") as f:
        return f.read()


def _open_channel(address, tls_ca, token):
    """Returns a channel to `address`: plaintext, or TLS trusting the CA `tls_ca` (a PEM
    file's path or its bytes) with `token` sent on every call as `authorization: Bearer`."""
    options = [
        ("grpc.max_receive_message_length", _MAX_MESSAGE_BYTES),
        ("grpc.max_send_message_length", _MAX_MESSAGE_BYTES),
    ]
    if tls_ca is None:
        if token is not None:
            raise ValueError("a token needs tls_ca: it is never sent in plaintext")
        return grpc.insecure_channel(address, options=options)
    credentials = grpc.ssl_channel_credentials(root_certificates=_read_pem(tls_ca))
    if token is not None:
        credentials = grpc.composite_channel_credentials(
            credentials, grpc.access_token_call_credentials(token))
    return grpc.secure_channel(address, credentials, options=options)


def _upload_messages(spec):
    """Yields UploadJob's stream for `spec`, whose model is ONNX bytes: the spec without them
    and their size, then the bytes in UPLOAD_CHUNK_BYTES chunks."""
    model = spec.model.onnx_model
    head = pb.JobSpec(name=spec.name, plan=spec.plan, train=spec.train, owner=spec.owner,
                      data=spec.data, ranks=spec.ranks,
                      model=pb.ModelSource(onnx=spec.model.onnx))
    yield pb.SubmitJobChunk(spec=head, onnx_model_bytes=len(model))
    view = memoryview(model)
    for at in range(0, len(model), UPLOAD_CHUNK_BYTES):
        yield pb.SubmitJobChunk(onnx_model_chunk=bytes(view[at:at + UPLOAD_CHUNK_BYTES]))


class Client:
    """Calls headroomd's Headroom service; every failed call raises HeadroomError.

    Unary calls (plan, profile, submit, cancel, jobs, timeline, profiles) have a deadline of
    `timeout` seconds (None: none); watch() and wait() have none, since jobs run for as long
    as they run. Methods return the response message, except where the response only wraps
    one thing: jobs() and profiles() return lists (all pages), timeline() the MemoryTimeline,
    cancel() the JobState. A model is a ModelSource (see zoo()), ZooModel or GraphDef (see
    torch_graph.graph_from_module). Byte sizes may be ints or strings ("400MiB").

    tls_ca (a PEM file's path, or its bytes) makes the channel TLS, trusting that CA; token
    is then sent on every call as `authorization: Bearer TOKEN` (headroomd --token-file). A
    token without tls_ca raises ValueError: it is never sent in plaintext.

    Owns its channel unless one is passed in; close() (or `with`) closes an owned one. `stub`
    replaces the generated HeadroomStub, for tests. Safe to share between threads, as gRPC
    channels are.
    """

    def __init__(self, address="127.0.0.1:50051", timeout=60.0, channel=None, stub=None,
                 tls_ca=None, token=None):
        self.address = address
        self.timeout = timeout
        self._owned_channel = None
        if stub is None:
            if channel is None:
                channel = _open_channel(address, tls_ca, token)
                self._owned_channel = channel
            stub = pb_grpc.HeadroomStub(channel)
        self._stub = stub

    def close(self):
        """Closes the channel if the client opened it."""
        if self._owned_channel is not None:
            self._owned_channel.close()
            self._owned_channel = None

    def __enter__(self):
        return self

    def __exit__(self, *exc_info):
        self.close()

    def _call(self, method, request):
        """Returns method(request) under the deadline; gRPC errors become HeadroomError."""
        try:
            return method(request, timeout=self.timeout)
        except grpc.RpcError as err:
            raise HeadroomError.from_rpc_error(err) from err

    # ---- Planning and profiling -------------------------------------------------------------

    def plan(self, model, budget_bytes=0, frontier=False, device="cpu", inference=False,
             optimizer=None, disable_offload=False, alignment_bytes=0):
        """Returns the PlanResponse for `model` under `budget_bytes` (0: no budget).

        frontier: also compute the memory/time Pareto frontier. device: the cost model's
        preset ("cpu", "h100", "h200") or a DeviceModel. optimizer: None (SGD with momentum),
        "sgd", "adam" or an Optimizer. A budget below the smallest feasible one raises
        HeadroomError FAILED_PRECONDITION naming it.
        """
        request = pb.PlanRequest(
            model=model_source(model),
            options=plan_options(budget_bytes, frontier, device, inference, optimizer,
                                 disable_offload, alignment_bytes))
        return self._call(self._stub.Plan, request)

    def profile(self, model, budget_bytes=0, steps=3, backend="", seed=1, trace=False,
                device="cpu", optimizer=None, disable_offload=False):
        """Returns the ProfileResponse of running `steps` training steps of `model` under a
        plan for `budget_bytes`. backend: "cpu", "cuda" or "" (the daemon's). trace: also
        return the Chrome trace JSON (trace_json)."""
        request = pb.ProfileRequest(
            model=model_source(model),
            plan=plan_options(budget_bytes, device=device, optimizer=optimizer,
                              disable_offload=disable_offload),
            steps=steps, backend=backend, seed=seed, trace=trace)
        return self._call(self._stub.Profile, request)

    def profiles(self, summaries_only=False):
        """Returns the StoredProfiles the daemon ran, newest first; summaries_only leaves out
        their timeline samples and op costs."""
        request = pb.ListProfilesRequest(summaries_only=summaries_only)
        return list(self._call(self._stub.ListProfiles, request).profiles)

    # ---- Jobs -------------------------------------------------------------------------------

    def submit(self, model, budget_bytes=0, steps=100, name="", seed=1, checkpoint_every=0,
               backend="", device="cpu", optimizer=None, disable_offload=False, data=None,
               ranks=1, bucket_bytes=0, sync_batchnorm=False):
        """Returns the SubmitJobResponse (job_id, state, plan) of queueing `steps` training
        steps of `model` under `budget_bytes`. checkpoint_every: save parameters every this
        many steps (0: the daemon's default). backend: "cpu", "cuda" or "" (the daemon's).

        data: train on real data instead, a dict of DataOptions' fields (or a DataOptions),
        e.g. {"dataset": "fashion-mnist", "epochs": 5, "eval_every": 1, "lr_schedule":
        "cosine"}; `steps` is then ignored (the epochs decide). A dataset path must lie under
        one of the daemon's --data-root directories. watch() then yields progress whose
        `fit` holds the epoch, the last validation loss and accuracy and the input wait.

        ranks: train as this many data-parallel processes on the daemon's host (JobSpec.ranks;
        the model's batch is per rank; a zoo model on the cpu backend); watch() then yields
        every rank's memory in `ranks`. With ranks above 1, bucket_bytes (an int or "4MiB")
        closes a gradient bucket at that many bytes (0: one per gradient) and sync_batchnorm
        normalises every batch norm over the global batch (JobSpec.plan.data_parallel);
        ValueError where they are given for one rank.

        An ONNX model (see onnx()) is streamed to the daemon in chunks (UploadJob), so it
        may exceed the daemon's --max-message-bytes, up to its --max-upload-bytes (512 MiB
        by default); the job trains from the model's own weights. A daemon that predates
        UploadJob gets it whole through SubmitJob instead."""
        spec = pb.JobSpec(
            name=name,
            model=model_source(model),
            plan=plan_options(budget_bytes, device=device, optimizer=optimizer,
                              disable_offload=disable_offload),
            train=pb.TrainOptions(steps=steps, seed=seed, backend=backend,
                                  checkpoint_interval_steps=checkpoint_every))
        if not isinstance(ranks, int) or ranks < 1:
            raise ValueError(f"ranks must be a whole number of at least 1, not {ranks!r}")
        if ranks > 1:
            spec.ranks = ranks
            spec.plan.data_parallel.bucket_bytes = parse_bytes(bucket_bytes)
            spec.plan.data_parallel.sync_batch_norm = sync_batchnorm
        elif parse_bytes(bucket_bytes) > 0 or sync_batchnorm:
            raise ValueError(f"{'bucket_bytes' if parse_bytes(bucket_bytes) else 'sync_batchnorm'} "
                             f"needs ranks above 1, not {ranks}")
        if data is not None:
            spec.data.CopyFrom(data if isinstance(data, pb.DataOptions) else pb.DataOptions(**data))
            spec.train.steps = 0
        if spec.model.WhichOneof("source") == "onnx_model":
            try:
                return self._stub.UploadJob(_upload_messages(spec), timeout=self.timeout)
            except grpc.RpcError as err:
                if err.code() != grpc.StatusCode.UNIMPLEMENTED:
                    raise HeadroomError.from_rpc_error(err) from err
        return self._call(self._stub.SubmitJob, pb.SubmitJobRequest(spec=spec))

    def watch(self, job_id, timeout=None):
        """Yields the JobProgress messages of job `job_id` until the job ends (the daemon
        closes the stream). Closing the generator early cancels the call. `timeout` bounds
        the whole stream (None: no deadline)."""
        call = self._stub.WatchJob(pb.WatchJobRequest(job_id=job_id), timeout=timeout)
        try:
            for progress in call:
                yield progress
        except grpc.RpcError as err:
            raise HeadroomError.from_rpc_error(err) from err
        finally:
            call.cancel()  # A no-op once the stream has ended.

    def wait(self, job_id, on_progress=None, timeout=None):
        """Returns the last JobProgress of job `job_id`, once its stream ends; callers check
        its state (JOB_STATE_SUCCEEDED, _FAILED with the reason in `message`, _CANCELLED).
        Calls on_progress(progress) for every message, the last included."""
        last = None
        for progress in self.watch(job_id, timeout=timeout):
            if on_progress is not None:
                on_progress(progress)
            last = progress
        if last is None:
            raise HeadroomError("UNKNOWN", f"the watch of job '{job_id}' ended with no progress")
        return last

    def cancel(self, job_id):
        """Returns the JobState of job `job_id` after cancelling it."""
        return self._call(self._stub.CancelJob, pb.CancelJobRequest(job_id=job_id)).state

    def jobs(self, states=None, page_size=0):
        """Returns every JobInfo, newest first, following page tokens to the last page.
        states: only jobs in these states (JobState values or names such as "RUNNING");
        page_size: jobs per call (0: the daemon's default)."""
        request = pb.ListJobsRequest(states=[_job_state(s) for s in states or []],
                                     page_size=page_size)
        jobs = []
        tokens_seen = set()
        while True:
            response = self._call(self._stub.ListJobs, request)
            jobs.extend(response.jobs)
            token = response.next_page_token
            if not token:
                return jobs
            if token in tokens_seen:
                raise HeadroomError("INTERNAL", f"ListJobs returned page token '{token}' twice")
            tokens_seen.add(token)
            request.page_token = token

    def timeline(self, job_id, max_samples=0):
        """Returns the MemoryTimeline of job `job_id` so far (peak_bytes, peak_node,
        samples, ...), downsampled to at most `max_samples` samples (0: all)."""
        request = pb.GetTimelineRequest(job_id=job_id, max_samples=max_samples)
        return self._call(self._stub.GetTimeline, request).timeline
