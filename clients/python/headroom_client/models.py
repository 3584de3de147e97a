"""Where a model comes from: zoo specs, graph descriptions and their files."""

import os

from google.protobuf import text_format

from headroom_client.protos import pb

# File name endings the headroom CLI reads as protobuf text; anything else is binary.
_TEXT_SUFFIXES = (".pbtxt", ".txtpb", ".textproto")


def zoo(name, batch=16, **options):
    """Returns a ModelSource for the zoo model `name` ("resnet18", "mlp", "transformer", ...;
    `headroom zoo` lists them) with `batch` samples per step. Options are the builder's
    integer options by name (image_size=64, classes=10, depth=..., ...); the daemon rejects
    unknown ones."""
    spec = pb.ZooModel(name=name, batch=batch)
    for key, value in options.items():
        if isinstance(value, bool) or not isinstance(value, int):
            raise TypeError(f"zoo option '{key}' is {value!r}; zoo options are integers")
        spec.options[key] = value
    return pb.ModelSource(zoo=spec)


def onnx(model, batch=16, loss="softmax_cross_entropy", classes=0):
    """Returns a ModelSource carrying an ONNX model: `model` is the serialized
    onnx.ModelProto (bytes) or a path to a .onnx file. The daemon imports it with `batch`
    samples per step (replacing its symbolic batch dimension), attaches `loss` to its first
    output (with `classes` checked when not 0), and trains a job from its weights.
    Client.submit() streams the model in chunks (UploadJob), up to the daemon's
    --max-upload-bytes (512 MiB by default); plan() and profile() send it whole in one
    request, which must fit the daemon's --max-message-bytes (64 MiB by default): for larger
    models plan `headroom graph --onnx FILE --emit out.pb`'s description instead."""
    if isinstance(model, (str, os.PathLike)):
        with open(model, "rb") as f:
            model = f.read()
    if not isinstance(model, (bytes, bytearray)):
        raise TypeError(f"an ONNX model is bytes or a file path, not {type(model).__name__}")
    return pb.ModelSource(onnx_model=bytes(model),
                          onnx=pb.OnnxImport(batch=batch, loss=loss, classes=classes))


def model_source(model):
    """Returns `model` as a ModelSource: a ModelSource as is, a ZooModel or GraphDef wrapped.
    Raises TypeError for anything else."""
    if isinstance(model, pb.ModelSource):
        return model
    if isinstance(model, pb.ZooModel):
        return pb.ModelSource(zoo=model)
    if isinstance(model, pb.GraphDef):
        return pb.ModelSource(graph=model)
    raise TypeError(f"a model is a ModelSource (see zoo()), ZooModel or GraphDef, not "
                    f"{type(model).__name__}")


def _is_text(path):
    return os.fspath(path).endswith(_TEXT_SUFFIXES)


def write_graph(graph, path):
    """Writes `graph` (a GraphDef) to `path`: protobuf text for .pbtxt, .txtpb and
    .textproto, binary otherwise (.pb), as `headroom graph --graph FILE` reads them."""
    if _is_text(path):
        with open(path, "w", encoding="utf-8") as f:
            f.write(text_format.MessageToString(graph))
    else:
        with open(path, "wb") as f:
            f.write(graph.SerializeToString())


def read_graph(path):
    """Returns the GraphDef in `path`, read as write_graph() writes it."""
    graph = pb.GraphDef()
    if _is_text(path):
        with open(path, encoding="utf-8") as f:
            text_format.Parse(f.read(), graph)
    else:
        with open(path, "rb") as f:
            graph.ParseFromString(f.read())
    return graph
