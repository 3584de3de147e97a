"""Python client of headroomd, Headroom's GPU-memory planning service.

    from headroom_client import Client, zoo

    with Client("127.0.0.1:50051") as client:
        plan = client.plan(zoo("resnet18", batch=32), budget_bytes="2GiB")
        job = client.submit(zoo("resnet18", batch=32), budget_bytes="2GiB", steps=50)
        final = client.wait(job.job_id, on_progress=print)

`pb` is the generated message module (headroom_pb2): `pb.JOB_STATE_SUCCEEDED`,
`pb.GraphDef()`. PyTorch models convert with headroom_client.torch_graph.graph_from_module
(imported on its own, so this package does not need torch).
"""

import pkgutil

# The generated stubs (headroom_client/_proto) may sit in another directory on sys.path than
# these sources (e.g. clients/python and bazel-bin/clients/python): search them all.
__path__ = pkgutil.extend_path(__path__, __name__)

from headroom_client.client import Client  # noqa: E402
from headroom_client.errors import HeadroomError  # noqa: E402
from headroom_client.models import model_source, onnx, read_graph, write_graph, zoo  # noqa: E402
from headroom_client.protos import pb  # noqa: E402
from headroom_client.sizes import format_bytes, parse_bytes  # noqa: E402

__all__ = [
    "Client",
    "HeadroomError",
    "format_bytes",
    "model_source",
    "onnx",
    "parse_bytes",
    "pb",
    "read_graph",
    "write_graph",
    "zoo",
]
