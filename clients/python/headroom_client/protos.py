"""The generated message and service modules, with a clear error where they are missing."""

try:
    from headroom_client._proto import headroom_pb2 as pb
    from headroom_client._proto import headroom_pb2_grpc as pb_grpc
except ModuleNotFoundError as err:
    if err.name is None or not err.name.startswith("headroom_client._proto"):
        raise  # grpc or protobuf itself is missing: its own message says which.
    raise ImportError(
        "headroom_client: the generated stubs (headroom_client/_proto) are missing; run "
        "clients/python/generate_stubs.sh, or `bazel build //clients/python:stubs` and add "
        "bazel-bin/clients/python to PYTHONPATH") from err

__all__ = ["pb", "pb_grpc"]
