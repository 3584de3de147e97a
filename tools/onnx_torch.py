#!/usr/bin/python3
"""Runs an ONNX model with PyTorch: an evaluator independent of Headroom's importer, for
checking what `headroom export` writes (Debian has no onnxruntime, and its python3-onnx is
not installed here, so the model is parsed with protoc's Python code for Debian's
/usr/include/onnx/onnx.proto).

    /usr/bin/python3 tools/onnx_torch.py MODEL.onnx IN.bin OUT.bin [--batch N]

IN.bin: the model's one input, float32 row-major, [N, ...] with the model's other dims;
OUT.bin: its first output, float32. Library use: load_onnx_module(dir), run(model, feeds).

Every op graph/onnx_export writes at opset 17 is interpreted with torch.nn.functional in
float32, batch norm in inference mode (F.batch_norm(training=False)): Conv, Gemm, MatMul,
BatchNormalization, LayerNormalization, Relu, Clip, LeakyRelu, Elu, Selu, Softplus, Sqrt,
Erf, Sigmoid, Tanh, HardSigmoid, HardSwish, PRelu, Pow, Add, Sub, Mul, Div, MaxPool,
AveragePool, GlobalAveragePool, Flatten, Reshape, Transpose, Concat, Split, Slice, Expand,
Gather, Softmax, Constant, ConvTranspose, InstanceNormalization, ReduceSum, ReduceMax,
ReduceMin, Shape and Resize (nearest 'asymmetric'/'floor'; linear 'half_pixel',
'pytorch_half_pixel' or 'align_corners'; the spec's sizes or scales, the latter also setting
the coordinates, which is F.interpolate's scale_factor). Any other op or mode is an error
naming it.
"""

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import torch
import torch.nn.functional as F

ONNX_PROTO = "/usr/include/onnx/onnx.proto"


def load_onnx_module(out_dir):
    """Returns the onnx_pb2 module protoc generates for Debian's onnx.proto into out_dir."""
    subprocess.run(["protoc", "-I" + os.path.dirname(ONNX_PROTO), "--python_out=" + out_dir,
                    ONNX_PROTO], check=True)
    sys.path.insert(0, out_dir)
    import onnx_pb2  # noqa: E402  (generated above)
    return onnx_pb2


_NP = {1: np.float32, 6: np.int32, 7: np.int64, 9: np.bool_, 11: np.float64}


def tensor_of(t):
    """Returns a TensorProto's value as a torch tensor."""
    dtype = _NP[t.data_type]
    shape = tuple(t.dims)
    if t.raw_data:
        a = np.frombuffer(t.raw_data, dtype=dtype)
    elif t.data_type == 1:
        a = np.array(t.float_data, dtype=dtype)
    elif t.data_type in (6, 9):
        a = np.array(t.int32_data, dtype=dtype)
    elif t.data_type == 7:
        a = np.array(t.int64_data, dtype=dtype)
    else:
        a = np.array(t.double_data, dtype=dtype)
    return torch.from_numpy(a.reshape(shape).copy())


def attrs_of(node):
    out = {}
    for a in node.attribute:
        if a.type == 1:
            out[a.name] = a.f
        elif a.type == 2:
            out[a.name] = a.i
        elif a.type == 3:
            out[a.name] = a.s.decode()
        elif a.type == 4:
            out[a.name] = tensor_of(a.t)
        elif a.type == 7:
            out[a.name] = list(a.ints)
        else:
            raise ValueError(f"node '{node.name}': attribute '{a.name}' of type {a.type}")
    return out


def _pad2d(x, pads, value):
    """ONNX pads [top, left, bottom, right] as F.pad's (left, right, top, bottom)."""
    top, left, bottom, right = pads
    if top == left == bottom == right == 0:
        return x
    return F.pad(x, (left, right, top, bottom), value=value)


def _max_pool(x, a):
    k = a["kernel_shape"]
    s = a.get("strides", [1, 1])
    pads = a.get("pads", [0, 0, 0, 0])
    ceil = bool(a.get("ceil_mode", 0))
    return F.max_pool2d(_pad2d(x, pads, float("-inf")), k, s, 0, ceil_mode=ceil)


def _avg_pool(x, a):
    k = a["kernel_shape"]
    s = a.get("strides", [1, 1])
    pads = a.get("pads", [0, 0, 0, 0])
    ceil = bool(a.get("ceil_mode", 0))
    include = bool(a.get("count_include_pad", 0))
    if pads[0] == pads[2] and pads[1] == pads[3]:
        return F.avg_pool2d(x, k, s, (pads[0], pads[1]), ceil_mode=ceil,
                            count_include_pad=include)
    summed = F.avg_pool2d(_pad2d(x, pads, 0.0), k, s, 0, ceil_mode=ceil) * (k[0] * k[1])
    if include:
        return summed / (k[0] * k[1])
    ones = _pad2d(torch.ones_like(x[:1, :1]), pads, 0.0)
    count = F.avg_pool2d(ones, k, s, 0, ceil_mode=ceil) * (k[0] * k[1])
    return summed / count


def _reshape(x, shape):
    target = [int(d) for d in shape]
    target = [x.shape[i] if d == 0 else d for i, d in enumerate(target)]
    return x.reshape(target)


def _slice(x, starts, ends, axes=None, steps=None):
    """ONNX's Slice: negative bounds count from the end, then clamp to [0, dim] (a positive
    step) or [-1, dim - 1] (a negative one, where -1 runs through element 0)."""
    starts, ends = starts.tolist(), ends.tolist()
    axes = list(range(len(starts))) if axes is None else axes.tolist()
    steps = [1] * len(starts) if steps is None else steps.tolist()
    for st, en, ax, sp in zip(starts, ends, axes, steps):
        ax = ax + x.dim() if ax < 0 else ax
        dim = x.shape[ax]
        st = st + dim if st < 0 else st
        en = en + dim if en < 0 else en
        low, high = (0, dim) if sp > 0 else (-1, dim - 1)
        st, en = min(max(st, low), high), min(max(en, low), high)
        x = x.index_select(ax, torch.arange(st, en, sp, dtype=torch.int64))
    return x


def _expand(x, shape):
    target = [int(d) for d in shape]
    lead = len(target) - x.dim()
    out = [max(t, x.shape[i - lead]) if i >= lead else t for i, t in enumerate(target)]
    return x.expand(out)


def _conv_transpose(i, a):
    """ONNX's ConvTranspose: F.conv_transpose2d without padding, then the pads cropped (they
    may differ between the two ends)."""
    top, left, bottom, right = a.get("pads", [0, 0, 0, 0])
    y = F.conv_transpose2d(i[0], i[1], i[2] if len(i) > 2 else None, a.get("strides", [1, 1]),
                           0, a.get("output_padding", [0, 0]), a.get("group", 1),
                           a.get("dilations", [1, 1]))
    return y[:, :, top:y.shape[2] - bottom, left:y.shape[3] - right]


def _reduce(x, axes, keepdims, fn):
    axes = list(range(x.dim())) if axes is None or len(axes) == 0 else [int(d) for d in axes]
    return fn(x, dim=axes, keepdim=bool(keepdims))


def _resize(node, a, x, scales, sizes):
    """ONNX's Resize in the modes torch 1.13 writes for F.interpolate, as F.interpolate."""
    mode = a.get("mode", "nearest")
    coords = a.get("coordinate_transformation_mode", "half_pixel")
    if scales is not None and scales.numel() > 0:
        s = [float(v) for v in scales.tolist()]
        if s[0] != 1 or s[1] != 1:
            raise ValueError(f"node '{node.name}': scales {s} resize N or C")
        how = {"scale_factor": (s[2], s[3])}
    else:
        how = {"size": tuple(int(v) for v in sizes.tolist()[2:])}
    if mode == "nearest":
        if coords != "asymmetric" or a.get("nearest_mode", "round_prefer_floor") != "floor":
            raise ValueError(f"node '{node.name}': nearest with {coords} is not interpreted")
        return F.interpolate(x, mode="nearest", **how)
    if mode == "linear" and coords in ("half_pixel", "pytorch_half_pixel", "align_corners"):
        return F.interpolate(x, mode="bilinear", align_corners=coords == "align_corners", **how)
    raise ValueError(f"node '{node.name}': Resize mode {mode} with {coords} is not interpreted")


def _ops():
    return {
        "Relu": lambda i, a: F.relu(i[0]),
        "Sigmoid": lambda i, a: torch.sigmoid(i[0]),
        "Tanh": lambda i, a: torch.tanh(i[0]),
        "Erf": lambda i, a: torch.erf(i[0]),
        "Sqrt": lambda i, a: torch.sqrt(i[0]),
        "Softplus": lambda i, a: torch.log1p(torch.exp(i[0])),
        "LeakyRelu": lambda i, a: F.leaky_relu(i[0], a.get("alpha", 0.01)),
        "Elu": lambda i, a: F.elu(i[0], a.get("alpha", 1.0)),
        "Selu": lambda i, a: a.get("gamma", 1.0507) * torch.where(
            i[0] > 0, i[0], a.get("alpha", 1.67326) * (torch.exp(i[0]) - 1)),
        "HardSigmoid": lambda i, a: torch.clamp(a.get("alpha", 0.2) * i[0] + a.get("beta", 0.5),
                                                0, 1),
        "HardSwish": lambda i, a: F.hardswish(i[0]),
        "PRelu": lambda i, a: torch.where(i[0] >= 0, i[0], i[1] * i[0]),
        "Pow": lambda i, a: torch.pow(i[0], i[1]),
        "Clip": lambda i, a: torch.clamp(i[0], float(i[1]), float(i[2])),
        "Add": lambda i, a: i[0] + i[1],
        "Sub": lambda i, a: i[0] - i[1],
        "Mul": lambda i, a: i[0] * i[1],
        "Div": lambda i, a: i[0] / i[1],
        "Conv": lambda i, a: F.conv2d(
            _pad2d(i[0], a.get("pads", [0, 0, 0, 0]), 0.0), i[1], i[2] if len(i) > 2 else None,
            a.get("strides", [1, 1]), 0, a.get("dilations", [1, 1]), a.get("group", 1)),
        "Gemm": lambda i, a: F.linear(i[0], i[1] if a.get("transB", 0) else i[1].t(),
                                      i[2] if len(i) > 2 else None),
        "MatMul": lambda i, a: torch.matmul(i[0], i[1]),
        "BatchNormalization": lambda i, a: F.batch_norm(
            i[0], i[3], i[4], i[1], i[2], training=False, eps=a.get("epsilon", 1e-5)),
        "LayerNormalization": lambda i, a: F.layer_norm(
            i[0], (i[0].shape[-1],), i[1], i[2] if len(i) > 2 else None, a.get("epsilon", 1e-5)),
        "MaxPool": lambda i, a: _max_pool(i[0], a),
        "AveragePool": lambda i, a: _avg_pool(i[0], a),
        "GlobalAveragePool": lambda i, a: i[0].mean(dim=(2, 3), keepdim=True),
        "Flatten": lambda i, a: i[0].reshape(
            int(np.prod(i[0].shape[:a.get("axis", 1)])), -1),
        "Reshape": lambda i, a: _reshape(i[0], i[1]),
        "Transpose": lambda i, a: i[0].permute(a["perm"]),
        "Concat": lambda i, a: torch.cat(i, a["axis"]),
        "Slice": lambda i, a: _slice(*i),
        "Expand": lambda i, a: _expand(i[0], i[1]),
        "Gather": lambda i, a: torch.index_select(i[0], a.get("axis", 0),
                                                  i[1].long().reshape(-1)).reshape(
            list(i[0].shape[:a.get("axis", 0)]) + list(i[1].shape) +
            list(i[0].shape[a.get("axis", 0) + 1:])),
        "Softmax": lambda i, a: F.softmax(i[0], a.get("axis", -1)),
        "ConvTranspose": _conv_transpose,
        "InstanceNormalization": lambda i, a: F.instance_norm(i[0], weight=i[1], bias=i[2],
                                                              eps=a.get("epsilon", 1e-5)),
        "Shape": lambda i, a: torch.tensor(list(i[0].shape), dtype=torch.int64),
        "ReduceSum": lambda i, a: _reduce(i[0], i[1].tolist() if len(i) > 1 else None,
                                          a.get("keepdims", 1), torch.sum),
        "ReduceMax": lambda i, a: _reduce(i[0], a.get("axes"), a.get("keepdims", 1), torch.amax),
        "ReduceMin": lambda i, a: _reduce(i[0], a.get("axes"), a.get("keepdims", 1), torch.amin),
    }


OPS = _ops()


def run(model, feeds):
    """Returns the model's outputs (a list of torch tensors) for feeds {input name: tensor}."""
    values = {t.name: tensor_of(t) for t in model.graph.initializer}
    values.update(feeds)
    for node in model.graph.node:
        a = attrs_of(node)
        if node.op_type == "Constant":
            values[node.output[0]] = a["value"]
            continue
        if node.op_type == "Split":
            sizes = values[node.input[1]].tolist()
            for name, part in zip(node.output, torch.split(values[node.input[0]], sizes,
                                                           a.get("axis", 0))):
                values[name] = part
            continue
        if node.op_type == "Resize":
            # Positional inputs X, roi, scales, sizes; empty names are absent.
            given = [values[n] if n else None for n in node.input] + [None] * 4
            values[node.output[0]] = _resize(node, a, given[0], given[2], given[3])
            continue
        if node.op_type not in OPS:
            raise ValueError(f"node '{node.name}': op {node.op_type} is not interpreted")
        inputs = [values[n] for n in node.input if n]
        values[node.output[0]] = OPS[node.op_type](inputs, a)
    return [values[o.name] for o in model.graph.output]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("inputs")
    parser.add_argument("out")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        onnx_pb2 = load_onnx_module(tmp)
        model = onnx_pb2.ModelProto()
        with open(args.model, "rb") as f:
            model.ParseFromString(f.read())
    inp = model.graph.input[0]
    dims = [d.dim_value for d in inp.type.tensor_type.shape.dim][1:]
    x = np.fromfile(args.inputs, dtype=np.float32).reshape([-1] + dims)
    with torch.no_grad():
        y = run(model, {inp.name: torch.from_numpy(x)})[0]
    y.numpy().astype(np.float32).tofile(args.out)
    print(f"{args.model}: logits {list(y.shape)} -> {args.out}")


if __name__ == "__main__":
    main()
