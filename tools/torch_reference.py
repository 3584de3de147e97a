#!/usr/bin/python3
"""PyTorch reference for Headroom's executor: trains an exported Headroom graph with torch.

`headroom train ... --export DIR` writes the forward graph, the initial parameters and
buffers, and every step's input batches. This script interprets the same graph with
torch.nn.functional ops, trains it with torch.optim on the CPU, and reports the loss and
wall time of every step and the peak memory of one training step. When DIR/headroom.json
exists (Headroom trained the same export), it compares the losses and final parameters and
exits 1 if a loss differs by more than the tolerance.

Run it with Debian's interpreter, which has PyTorch 1.13:

    /usr/bin/python3 tools/torch_reference.py DIR [--threads N] [--warmup K] [--json OUT]

Export directory (all binaries little-endian, dtype and shape from graph.json "tensors"):
    graph.json        name, loss, tensors, nodes (topological order), optimizer, steps,
                      state (offset_bytes/bytes of every parameter and buffer in state.bin),
                      batches (step, name, offset_bytes, bytes of every input and label in
                      batches.bin)
    state.bin         initial parameters and buffers
    batches.bin       the input and label tensors of every step
    headroom.json     optional: Headroom's "losses", "step_seconds", "final_state"
    final_state.bin   optional: Headroom's final parameters and buffers ("final_state" layout)

Training (one step, s = 0 .. steps-1)
-------------------------------------
The batch of step s is read into fresh tensors (not timed). Then, timed with
time.perf_counter: optimizer.zero_grad(set_to_none=False) (PyTorch 1.13's default: the
gradients are zeroed in place and kept between steps), forward, loss.backward(),
optimizer.step(). The recorded loss is the forward value, before the update.
Parameters (role "parameter") are leaf tensors with requires_grad=True, given to the
optimizer in the graph's tensor order; buffers are plain tensors that F.batch_norm updates
in place. Before the timed run, --warmup K untimed steps run on a throwaway copy of the
initial state (batches 0..K-1), so that one-time costs (oneDNN primitive creation, first
touches of memory) do not land in step 0; the timed run starts again from state.bin.
median_step_seconds is the median over all timed steps.

The interpreter drops each activation after its last use in the forward pass, as eager
PyTorch code does when a local goes out of scope; autograd keeps what backward needs.
ReLU is not done in place (torchvision's ResNets use inplace=True, saving one buffer per
conv-bn-relu).

Peak memory of one training step
--------------------------------
After the timed run, a separate pass builds a fresh copy of the initial state and an
optimizer with torch.profiler.profile(activities=[CPU], profile_memory=True) already open,
runs one unmeasured step (batch 0; it creates the gradients and the optimizer state) and
then measures one step (batch 1, or batch 0 when there is one step): loading the batch,
zero_grad, forward, backward, optimizer.step. While the profiler is on, c10's CPU allocator
reports every allocation and free (size and address); the script follows them in time
order, counting only blocks allocated inside the profiled pass, so it knows the live bytes
at every moment; two 1-byte marker blocks, allocated just before and just after the
measured step, find the step in that stream. It reports:

    persistent_bytes  the tensors held between steps: parameters + buffers + gradients +
                      optimizer state (momentum; Adam's exp_avg, exp_avg_sq and step),
                      summed over distinct storages (numel * element_size). It is checked
                      against the allocator's live bytes at the start of the measured step
                      ("persistent_check").
    peak_step_bytes   the peak, during the measured step, of the bytes of blocks that were
                      allocated during that step and are still live: the step's input
                      batch, activations saved for backward, temporaries (including
                      oneDNN's scratch buffers), the new gradients before they are added
                      into .grad.
    peak_bytes        persistent_bytes + peak_step_bytes: the step's total peak. (No
                      persistent tensor is freed during a step, so this is also the largest
                      number of live bytes during the step.)

Not counted: memory that does not come from c10's CPU allocator (Python objects, glibc
arenas, library globals, oneDNN's JIT code), and allocations on threads that do not carry
the profiler's state. The method follows bench/pytorch_peak.py, which documents it in
detail.

Comparison with Headroom (when DIR/headroom.json exists)
--------------------------------------------------------
loss check: at every step, |headroom - torch| <= loss_rtol * |torch| + loss_atol (defaults
1e-3 and 1e-4); a different number of steps also fails. final state: for every tensor of
final_state, ||headroom - torch|| / ||torch|| (L2 norms; the absolute norm when ||torch|| is
0), and the maximum over parameters (reported, not checked). step time: the ratio of the
median step times.

Exit status: 0 when training ran (and the comparison, if any, passed); 1 when the losses
differ; 2 when the export cannot be read or the graph uses an op this script does not know.
"""

import argparse
import gc
import json
import math
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

# Set by --autocast-bf16 (Run): the forward runs under torch.autocast's bf16.
AUTOCAST_BF16 = False
# Set by --headroom-bf16 (Run): the forward follows Headroom's bf16 policy (HeadroomBf16).
HEADROOM_BF16 = False
from torch.profiler import ProfilerActivity, profile

from torch_events import ALLOCATION_HELPERS, WalkEvents

DTYPES = {
    "float32": torch.float32,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
    "int32": torch.int32,
    "int64": torch.int64,
    "bool": torch.bool,
}
LEAF_ROLES = ("input", "label", "parameter", "buffer")
MARK_BYTES = 1  # Size of the blocks that mark the measured step's start and end.


class ExportError(Exception):
    """The export directory or its graph is not something this script can run."""


# ---- Reading the export ----------------------------------------------------------------


class Export:
    """An export directory: its graph.json, and reads of its state and batches.

    Call `Load(dir)` once; then `ReadState()` for a fresh copy of the initial parameters and
    buffers, and `ReadBatch(step)` for the inputs and labels of a step. Every tensor it
    returns is allocated by c10 (so the memory profiler sees it) and owned by the caller.
    """

    def __init__(self, directory, graph):
        self.directory = directory
        self.graph = graph
        self.name = graph.get("name", "graph")
        self.loss = graph["loss"]
        self.steps = int(graph["steps"])
        self.optimizer = graph["optimizer"]
        self.tensors = {}  # name -> {"shape", "dtype", "role"}, in the graph's order
        for t in graph["tensors"]:
            if t["dtype"] not in DTYPES:
                raise ExportError("tensor '%s' has dtype '%s'; known: %s"
                                  % (t["name"], t["dtype"], ", ".join(DTYPES)))
            self.tensors[t["name"]] = t
        self.nodes = graph["nodes"]
        self.state_entries = {e["name"]: e for e in graph.get("state", [])}
        self.batch_entries = {(int(e["step"]), e["name"]): e for e in graph.get("batches", [])}

    @staticmethod
    def Load(directory):
        path = os.path.join(directory, "graph.json")
        try:
            with open(path) as f:
                graph = json.load(f)
        except (OSError, ValueError) as e:
            raise ExportError("cannot read %s: %s" % (path, e))
        for key in ("loss", "tensors", "nodes", "optimizer", "steps"):
            if key not in graph:
                raise ExportError("%s has no '%s'" % (path, key))
        export = Export(directory, graph)
        export._CheckLayout()
        return export

    def Names(self, *roles):
        """Returns the names of the tensors with one of `roles`, in the graph's order."""
        return [n for n, t in self.tensors.items() if t.get("role") in roles]

    def _CheckLayout(self):
        """Every parameter and buffer has state, every input and label a batch per step,
        and each entry's size matches its tensor and lies inside its file."""
        state_size = _FileSize(os.path.join(self.directory, "state.bin"))
        for name in self.Names("parameter", "buffer"):
            if name not in self.state_entries:
                raise ExportError("parameter or buffer '%s' has no entry in graph.json "
                                  "'state'" % name)
            self._CheckEntry("state.bin", state_size, self.state_entries[name], name)
        feeds = self.Names("input", "label")
        if feeds and self.steps > 0:
            batch_size = _FileSize(os.path.join(self.directory, "batches.bin"))
            for step in range(self.steps):
                for name in feeds:
                    entry = self.batch_entries.get((step, name))
                    if entry is None:
                        raise ExportError("step %d has no batch for '%s' in graph.json "
                                          "'batches'" % (step, name))
                    self._CheckEntry("batches.bin", batch_size, entry, name)

    def _CheckEntry(self, file_name, file_bytes, entry, name):
        expected = TensorBytes(self.tensors[name])
        if int(entry["bytes"]) != expected:
            raise ExportError("%s entry '%s' has %d bytes; its shape %s %s needs %d"
                              % (file_name, name, entry["bytes"], self.tensors[name]["shape"],
                                 self.tensors[name]["dtype"], expected))
        end = int(entry["offset_bytes"]) + expected
        if end > file_bytes:
            raise ExportError("%s entry '%s' ends at byte %d, past the file's %d bytes"
                              % (file_name, name, end, file_bytes))

    def ReadState(self, file_name="state.bin", entries=None):
        """Returns {name: tensor} of every parameter and buffer (or of `entries`)."""
        entries = self.state_entries if entries is None else entries
        with open(os.path.join(self.directory, file_name), "rb") as f:
            return {name: _ReadTensor(f, e, self.tensors[name]) for name, e in entries.items()
                    if name in self.tensors}

    def ReadBatch(self, step, f):
        """Returns {name: tensor} of the inputs and labels of `step`, read from the open
        batches.bin `f`."""
        return {name: _ReadTensor(f, self.batch_entries[(step, name)], self.tensors[name])
                for name in self.Names("input", "label")}

    def OpenBatches(self):
        path = os.path.join(self.directory, "batches.bin")
        return open(path, "rb") if os.path.exists(path) else open(os.devnull, "rb")


def TensorBytes(tensor_def):
    """Returns numel * element size of a graph.json tensor."""
    return math.prod(tensor_def["shape"]) * _ElementBytes(DTYPES[tensor_def["dtype"]])


def _ElementBytes(dtype):
    return torch.empty((), dtype=dtype).element_size()


def _FileSize(path):
    try:
        return os.path.getsize(path)
    except OSError as e:
        raise ExportError("cannot read %s: %s" % (path, e))


def _ReadTensor(f, entry, tensor_def):
    """Reads one tensor straight into a tensor that c10's CPU allocator owns."""
    t = torch.empty(tensor_def["shape"], dtype=DTYPES[tensor_def["dtype"]])
    if t.numel():
        f.seek(int(entry["offset_bytes"]))
        view = t.view(-1).view(torch.uint8).numpy()
        if f.readinto(view) != view.nbytes:
            raise ExportError("short read of '%s'" % tensor_def["name"])
    return t


# ---- The ops ---------------------------------------------------------------------------
# Each op takes (inputs, attrs, node) and returns one tensor or a list of tensors. Defaults
# mirror graph/op_set.cc; the exporter fills every attribute, hand-written graphs need not.

# PyTorch's SELU constants (torch.nn.SELU), Headroom's defaults.
SELU_ALPHA = 1.6732632423543772848170429916717
SELU_GAMMA = 1.0507009873554804934193349852946

OP_DEFAULTS = {
    "MatMul": {"transpose_a": False, "transpose_b": False},
    "Conv2D": {"stride": [1, 1], "padding": [0, 0], "dilation": [1, 1], "groups": 1},
    "ConvTranspose2D": {"stride": [1, 1], "padding": [0, 0], "output_padding": [0, 0],
                        "dilation": [1, 1], "groups": 1},
    "Resize": {"mode": "nearest", "align_corners": False, "scale_h": 0.0, "scale_w": 0.0},
    "BatchNorm": {"epsilon": 1e-5, "momentum": 0.1},
    "LayerNorm": {"epsilon": 1e-5},
    "ReLU": {}, "ReLU6": {}, "Sigmoid": {}, "Tanh": {},
    "HardSigmoid": {"alpha": 1.0 / 6.0, "beta": 0.5}, "HardSwish": {},
    "GELU": {"approximate": "none"},
    "LeakyReLU": {"alpha": 0.01}, "ELU": {"alpha": 1.0},
    "SELU": {"alpha": SELU_ALPHA, "gamma": SELU_GAMMA},
    "Softplus": {}, "Sqrt": {}, "Erf": {}, "Mish": {},
    "Dropout": {"rate": 0.5},
    "Add": {}, "Mul": {}, "Sub": {}, "Div": {}, "PReLU": {},
    "Pow": {"exponent": 1.0},
    "MaxPool": {"stride": [], "padding": [0, 0], "ceil_mode": False},
    "AvgPool": {"stride": [], "padding": [0, 0], "ceil_mode": False, "count_include_pad": True},
    "GlobalAvgPool": {},
    "Flatten": {"axis": 1},
    "Reshape": {}, "Transpose": {}, "Concat": {}, "Split": {},
    "Slice": {"steps": []}, "Expand": {},
    "ReduceSum": {"axes": [], "keepdims": True}, "ReduceMax": {"axes": [], "keepdims": True},
    "ReduceMin": {"axes": [], "keepdims": True},
    "Softmax": {"axis": -1, "scale": 1.0, "causal": False},
    "Embedding": {}, "SoftmaxCrossEntropy": {},
    "GroupNorm": {"epsilon": 1e-5}, "PixelSoftmaxCrossEntropy": {"ignore_index": -100},
}
REQUIRED_ATTRS = {"MaxPool": ("kernel_size",), "AvgPool": ("kernel_size",),
                  "Reshape": ("shape",), "Transpose": ("perm",), "Concat": ("axis",),
                  "Split": ("axis", "sizes"), "Slice": ("axes", "starts", "ends"),
                  "Expand": ("shape",), "Resize": ("size",), "GroupNorm": ("num_groups",)}
# (fewest, most) inputs; None: any number.
NUM_INPUTS = {"MatMul": (2, 3), "Conv2D": (2, 3), "ConvTranspose2D": (2, 3), "BatchNorm": (5, 5), "LayerNorm": (3, 3),
              "Add": (2, 2), "Mul": (2, 2), "Sub": (2, 2), "Div": (2, 2), "PReLU": (2, 2),
              "Concat": (1, None),
              "Embedding": (2, 2), "SoftmaxCrossEntropy": (2, 2), "GroupNorm": (3, 3),
              "PixelSoftmaxCrossEntropy": (2, 2)}


def _Padding4(attrs):
    """Returns padding as (top, left, bottom, right)."""
    p = list(attrs["padding"])
    return (p[0], p[1], p[0], p[1]) if len(p) == 2 else tuple(p)


def _MatMul(x, attrs, node):
    a, b = x[0], x[1]
    bias = x[2] if len(x) == 3 else None
    if attrs["transpose_b"] and not attrs["transpose_a"] and b.dim() == 2:
        return F.linear(a, b, bias)  # What nn.Linear runs.
    if attrs["transpose_a"]:
        a = a.transpose(-1, -2)
    if attrs["transpose_b"]:
        b = b.transpose(-1, -2)
    y = torch.matmul(a, b)
    return y if bias is None else y + bias


def _Conv2D(x, attrs, node):
    top, left, bottom, right = _Padding4(attrs)
    inp = x[0]
    padding = (top, left)
    if (top, left) != (bottom, right):
        inp = F.pad(inp, (left, right, top, bottom))
        padding = (0, 0)
    return F.conv2d(inp, x[1], x[2] if len(x) == 3 else None, stride=tuple(attrs["stride"]),
                    padding=padding, dilation=tuple(attrs["dilation"]),
                    groups=attrs["groups"])


def _ConvTranspose2D(x, attrs, node):
    """F.conv_transpose2d (nn.ConvTranspose2d); asymmetric padding crops the unpadded output."""
    top, left, bottom, right = _Padding4(attrs)
    bias = x[2] if len(x) == 3 else None
    kwargs = dict(stride=tuple(attrs["stride"]), dilation=tuple(attrs["dilation"]),
                  groups=attrs["groups"])
    if (top, left) == (bottom, right):
        return F.conv_transpose2d(x[0], x[1], bias, padding=(top, left),
                                  output_padding=tuple(attrs["output_padding"]), **kwargs)
    full = F.conv_transpose2d(x[0], x[1], None, **kwargs)
    out_h = full.shape[2] - top - bottom + attrs["output_padding"][0]
    out_w = full.shape[3] - left - right + attrs["output_padding"][1]
    full = F.pad(full, (0, max(0, left + out_w - full.shape[3]), 0,
                        max(0, top + out_h - full.shape[2])))
    y = full[:, :, top:top + out_h, left:left + out_w]
    return y if bias is None else y + bias.reshape(1, -1, 1, 1)


def _Resize(x, attrs, node):
    """F.interpolate's kernels, upsample_nearest2d and upsample_bilinear2d, with the scale
    factors (0: from the sizes) per dim."""
    size = list(attrs["size"])
    scales = [s if s > 0 else None for s in (attrs["scale_h"], attrs["scale_w"])]
    if attrs["mode"] == "bilinear":
        return torch._C._nn.upsample_bilinear2d(x[0], size, attrs["align_corners"], *scales)
    return torch._C._nn.upsample_nearest2d(x[0], size, *scales)


def _BatchNorm(x, attrs, node):
    return F.batch_norm(x[0], x[3], x[4], x[1], x[2], training=True,
                        momentum=attrs["momentum"], eps=attrs["epsilon"])


def _LayerNorm(x, attrs, node):
    return F.layer_norm(x[0], (x[0].shape[-1],), x[1], x[2], eps=attrs["epsilon"])


_warned_dropout = set()


def _Dropout(x, attrs, node):
    rate = attrs["rate"]
    if rate > 0 and node["name"] not in _warned_dropout:
        _warned_dropout.add(node["name"])
        print("warning: node '%s' (Dropout) has rate %g; its masks will not match Headroom's, "
              "so losses will differ" % (node["name"], rate), file=sys.stderr)
    return F.dropout(x[0], p=rate, training=True)


def _Pool(x, attrs, node):
    kernel = tuple(attrs["kernel_size"])
    stride = tuple(attrs["stride"]) or kernel
    top, left, bottom, right = _Padding4(attrs)
    inp, padding = x[0], (top, left)
    is_max = node["op"] == "MaxPool"
    if (top, left) != (bottom, right):
        if attrs["ceil_mode"] or not (is_max or attrs["count_include_pad"]):
            raise ExportError("node '%s' (%s): asymmetric padding %s is supported only with "
                              "ceil_mode=false%s" % (node["name"], node["op"], attrs["padding"],
                                                     "" if is_max else
                                                     " and count_include_pad=true"))
        inp = F.pad(inp, (left, right, top, bottom), value=-math.inf if is_max else 0.0)
        padding = (0, 0)
    if is_max:
        return F.max_pool2d(inp, kernel, stride, padding, ceil_mode=attrs["ceil_mode"])
    return F.avg_pool2d(inp, kernel, stride, padding, ceil_mode=attrs["ceil_mode"],
                        count_include_pad=attrs["count_include_pad"])


def _Flatten(x, attrs, node):
    shape = list(x[0].shape)
    axis = attrs["axis"] + len(shape) if attrs["axis"] < 0 else attrs["axis"]
    return x[0].reshape(math.prod(shape[:axis]), math.prod(shape[axis:]))


def _HardSigmoid(x, attrs, node):
    """clamp(alpha x + beta, 0, 1). With PyTorch's alpha 1/6 and beta 1/2 it is
    F.hardsigmoid (what nn.Hardsigmoid runs); otherwise hardtanh, whose gradient, like
    Headroom's, flows only strictly inside (0, 1)."""
    alpha, beta = attrs["alpha"], attrs["beta"]
    if math.isclose(alpha, 1.0 / 6.0, rel_tol=1e-9) and beta == 0.5:
        return F.hardsigmoid(x[0])
    return F.hardtanh(alpha * x[0] + beta, 0.0, 1.0)


def _Slice(x, attrs, node):
    """x[start:end:step] along each listed axis (negative axes count from the end). A
    negative step (end -1 runs through element 0) is torch.flip of the axis, then the
    mirrored positive slice, as torch has no negative-step indexing."""
    axes, starts, ends = attrs["axes"], attrs["starts"], attrs["ends"]
    steps = list(attrs["steps"]) or [1] * len(axes)
    if not len(axes) == len(starts) == len(ends) == len(steps):
        raise ExportError("node '%s' (Slice): axes %s, starts %s, ends %s and steps %s need "
                          "one value per axis" % (node["name"], axes, starts, ends, steps))
    y = x[0]
    index = [slice(None)] * y.dim()
    flips = []
    for axis, start, end, step in zip(axes, starts, ends, steps):
        if step < 0:
            dim = y.shape[axis]
            flips.append(axis)
            start, end, step = dim - 1 - start, dim - 1 - end, -step
        index[axis] = slice(start, end, step)
    if flips:
        y = torch.flip(y, flips)
    return y[tuple(index)]


def _Reduce(x, attrs, node):
    """torch.sum, torch.amax or torch.amin over the listed axes (all when none are listed)."""
    axes = tuple(attrs["axes"]) or tuple(range(x[0].dim()))
    fn = {"ReduceSum": torch.sum, "ReduceMax": torch.amax, "ReduceMin": torch.amin}[node["op"]]
    return fn(x[0], dim=axes, keepdim=bool(attrs["keepdims"]))


def _Softmax(x, attrs, node):
    y = x[0] if attrs["scale"] == 1.0 else x[0] * attrs["scale"]
    if attrs["causal"]:
        t = y.shape[-1]
        mask = torch.ones(t, t, dtype=torch.bool).triu_(1)  # True where j > i.
        y = y.masked_fill(mask, -math.inf)
    return F.softmax(y, dim=attrs["axis"])


def _Selu(x, attrs, node):
    """F.selu at PyTorch's constants (ONNX's, rounded to float32, count as them), else
    gamma * elu(x, alpha)."""
    if abs(attrs["alpha"] - SELU_ALPHA) < 1e-6 and abs(attrs["gamma"] - SELU_GAMMA) < 1e-6:
        return F.selu(x[0])
    return attrs["gamma"] * F.elu(x[0], alpha=attrs["alpha"])


def _PRelu(x, attrs, node):
    """F.prelu where the slope is one value or one per channel (axis 1) shaped [C, 1, ...]
    as nn.PReLU's weight broadcasts; else its definition, x where x > 0, else slope * x."""
    data, slope = x
    c = data.shape[1] if data.dim() > 1 else 1
    if slope.numel() == 1 or (slope.numel() == c and slope.dim() <= data.dim() - 1 and
                              slope.shape[0] == c):
        return F.prelu(data, slope.reshape(-1))
    return torch.where(data > 0, data, slope * data)


def _SoftmaxCrossEntropy(x, attrs, node):
    logits, labels = x
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1).long())


def _PixelSoftmaxCrossEntropy(x, attrs, node):
    """F.cross_entropy over the classes on axis 1, pixels labelled ignore_index left out."""
    logits, labels = x
    return F.cross_entropy(logits, labels.long(), ignore_index=attrs["ignore_index"])


OPS = {
    "MatMul": _MatMul,
    "Conv2D": _Conv2D,
    "ConvTranspose2D": _ConvTranspose2D,
    "Resize": _Resize,
    "BatchNorm": _BatchNorm,
    "LayerNorm": _LayerNorm,
    "ReLU": lambda x, a, n: F.relu(x[0]),
    "ReLU6": lambda x, a, n: F.relu6(x[0]),
    "Sigmoid": lambda x, a, n: torch.sigmoid(x[0]),
    "Tanh": lambda x, a, n: torch.tanh(x[0]),
    "HardSigmoid": _HardSigmoid,
    "HardSwish": lambda x, a, n: F.hardswish(x[0]),
    "GELU": lambda x, a, n: F.gelu(x[0], approximate=a["approximate"]),
    "LeakyReLU": lambda x, a, n: F.leaky_relu(x[0], a["alpha"]),
    "ELU": lambda x, a, n: F.elu(x[0], alpha=a["alpha"]),
    "SELU": _Selu,
    "Softplus": lambda x, a, n: F.softplus(x[0]),  # beta 1, threshold 20.
    "Sqrt": lambda x, a, n: torch.sqrt(x[0]),
    "Erf": lambda x, a, n: torch.erf(x[0]),
    "Mish": lambda x, a, n: F.mish(x[0]),
    "Dropout": _Dropout,
    "Add": lambda x, a, n: x[0] + x[1],
    "Mul": lambda x, a, n: x[0] * x[1],
    "Sub": lambda x, a, n: x[0] - x[1],
    "Div": lambda x, a, n: x[0] / x[1],
    "PReLU": _PRelu,
    "Pow": lambda x, a, n: torch.pow(x[0], a["exponent"]),
    "MaxPool": _Pool,
    "AvgPool": _Pool,
    "GlobalAvgPool": lambda x, a, n: x[0].mean(dim=(2, 3), keepdim=True),
    "Flatten": _Flatten,
    "Reshape": lambda x, a, n: x[0].reshape(list(a["shape"])),
    "Transpose": lambda x, a, n: x[0].permute(list(a["perm"])),
    "Slice": _Slice,
    "Expand": lambda x, a, n: x[0].expand(list(a["shape"])),
    "ReduceSum": _Reduce,
    "ReduceMax": _Reduce,
    "ReduceMin": _Reduce,
    "Concat": lambda x, a, n: torch.cat(x, dim=a["axis"]),
    "Split": lambda x, a, n: list(torch.split(x[0], list(a["sizes"]), dim=a["axis"])),
    "Softmax": _Softmax,
    "Embedding": lambda x, a, n: F.embedding(x[0].long(), x[1]),
    "SoftmaxCrossEntropy": _SoftmaxCrossEntropy,
    "GroupNorm": lambda x, a, n: F.group_norm(x[0], a["num_groups"], x[1], x[2], a["epsilon"]),
    "PixelSoftmaxCrossEntropy": _PixelSoftmaxCrossEntropy,
}


# ---- Headroom's bf16 policy (--headroom-bf16) ------------------------------------------
#
# graph::ToMixedPrecision (graph/mixed_precision.h) as PyTorch ops, so that a replay rounds
# exactly where Headroom rounds:
#   - a float32 graph input, and a float32 parameter that a Conv2D, MatMul or Embedding
#     reads, is cast to bfloat16 (one cast per step; autograd's backward of the cast turns
#     the bf16 gradient into the float32 one the optimizer reads, as Headroom's CastGrad);
#   - every op takes the dtype of its activation inputs: where a floating input is bf16, its
#     output is bf16. A MatMul that is a linear layer (2-D weight read transposed: F.linear)
#     and a Conv2D run PyTorch's own bf16 kernels (oneDNN, float32 accumulation, the bias
#     fused: one rounding), as Headroom's direct path runs them. Every other op runs as
#     Headroom's CPU backend stages it (executor/cpu/cpu_bf16_kernels.cc): its bf16 inputs
#     widened exactly to float32, PyTorch's float32 kernel, the output rounded once. A
#     batched MatMul, or one whose bias the interpreter would add apart (torch.matmul then
#     + bias: two roundings), so computes what a bf16 GEMM with float32 accumulation and a
#     fused bias does (bf16 products are exact in float32); a Softmax keeps its scale and
#     mask inside; a norm its statistics and affine;
#   - the gradient flowing back through an op is rounded to bf16 at each bf16 input, as
#     Headroom's backward writes a bf16 dx; a Softmax's backward reads its rounded output
#     (_Bf16Softmax), the tensor Headroom keeps for it;
#   - BatchNorm, LayerNorm and GroupNorm keep float32 weight, bias and statistics; the
#     cross-entropy losses are float32 whatever the logits' dtype (dlogits bf16).
# Not modelled: the order of accumulation inside a kernel (oneDNN's against PyTorch's), so
# an output near a rounding boundary may round the other way.
BF16_CAST_READERS = ("Conv2D", "MatMul", "Embedding")
FLOAT32_LOSS_OPS = ("SoftmaxCrossEntropy", "PixelSoftmaxCrossEntropy")


def Bf16CastNames(export):
    """Returns the names of the leaves Headroom's policy casts to bfloat16: float32 inputs
    and the float32 parameters that a Conv2D, MatMul or Embedding reads."""
    names = {n for n, t in export.tensors.items()
             if t.get("role") == "input" and t["dtype"] == "float32"}
    for node in export.nodes:
        if node["op"] in BF16_CAST_READERS:
            for name in node["inputs"]:
                t = export.tensors.get(name)
                if t and t.get("role") == "parameter" and t["dtype"] == "float32":
                    names.add(name)
    return names


class _Bf16Softmax(torch.autograd.Function):
    """Headroom's Softmax of a bf16 x: computed in float32 (scale and causal mask inside),
    rounded once; its backward reads the rounded output, the tensor Headroom keeps for it
    (autograd would keep the float32 one), through PyTorch's own softmax backward kernel."""

    @staticmethod
    def forward(ctx, x, attrs):
        y = _Softmax([x.float()], attrs, None).to(torch.bfloat16)
        ctx.save_for_backward(y)
        ctx.axis, ctx.scale = attrs["axis"], attrs["scale"]
        return y

    @staticmethod
    def backward(ctx, dy):
        (y,) = ctx.saved_tensors
        dx = torch._softmax_backward_data(dy.float(), y.float(), ctx.axis, torch.float32)
        return (dx * ctx.scale).to(torch.bfloat16), None


def HeadroomBf16(fn, op):
    """Returns `fn` (an OPS entry) run under Headroom's bf16 policy for op `op`."""
    if op == "Conv2D":
        return fn
    if op == "MatMul":
        staged = HeadroomBf16(fn, "MatMul (staged)")
        return lambda x, attrs, node: (
            fn(x, attrs, node) if attrs["transpose_b"] and not attrs["transpose_a"] and
            x[1].dim() == 2 and x[0].dtype == torch.bfloat16 else staged(x, attrs, node))
    if op == "Softmax":
        return lambda x, attrs, node: (_Bf16Softmax.apply(x[0], attrs)
                                       if x[0].dtype == torch.bfloat16 else fn(x, attrs, node))

    def Run(x, attrs, node):
        floating = [t for t in x if torch.is_tensor(t) and t.is_floating_point()]
        if not any(t.dtype == torch.bfloat16 for t in floating):
            return fn(x, attrs, node)
        wide = [t.float() if torch.is_tensor(t) and t.dtype == torch.bfloat16 else t for t in x]
        out = fn(wide, attrs, node)
        if op in FLOAT32_LOSS_OPS:
            return out
        if isinstance(out, list):
            return [t.to(torch.bfloat16) if t.is_floating_point() else t for t in out]
        return out.to(torch.bfloat16) if out.is_floating_point() else out

    return Run


# ---- The interpreter -------------------------------------------------------------------


class GraphInterpreter:
    """Runs the forward pass of an export's graph with torch ops.

    Construct it once (it checks every node: known op, input count, required attributes,
    inputs defined before use); then `Forward(leaves)` per step, where `leaves` maps every
    input, label, parameter and buffer name to its tensor; it returns the loss tensor.
    Activations are dropped after their last use. Not thread-safe (Dropout's warning set).
    """

    def __init__(self, export):
        self.loss = export.loss
        # Leaves cast to bf16 before the forward (--headroom-bf16); none otherwise.
        self.bf16_casts = Bf16CastNames(export) if HEADROOM_BF16 else set()
        self.nodes = []  # (node, op function, attrs with defaults, names to drop after)
        defined = {n for n, t in export.tensors.items() if t.get("role") in LEAF_ROLES}
        last_use = {}
        for i, node in enumerate(export.nodes):
            where = "node '%s' (%s)" % (node.get("name", "?"), node.get("op", "?"))
            op = node.get("op")
            if op not in OPS:
                raise ExportError("%s: unknown op '%s'; this script knows %s"
                                  % (where, op, ", ".join(sorted(OPS))))
            lo, hi = NUM_INPUTS.get(op, (1, 1))
            n_in = len(node["inputs"])
            if n_in < lo or (hi is not None and n_in > hi):
                raise ExportError("%s: has %d inputs, needs %s" % (
                    where, n_in, lo if lo == hi else "%d to %s" % (lo, hi or "any")))
            attrs = dict(OP_DEFAULTS[op])
            attrs.update(node.get("attrs", {}))
            for required in REQUIRED_ATTRS.get(op, ()):
                if required not in attrs:
                    raise ExportError("%s: attribute '%s' is missing" % (where, required))
            for name in node["inputs"]:
                if name not in defined:
                    raise ExportError("%s: input '%s' is not a leaf tensor or an earlier "
                                      "node's output" % (where, name))
                last_use[name] = i
            n_out = len(attrs["sizes"]) if op == "Split" else 1
            if len(node["outputs"]) != n_out:
                raise ExportError("%s: has %d outputs, needs %d"
                                  % (where, len(node["outputs"]), n_out))
            defined.update(node["outputs"])
            self.nodes.append((node, HeadroomBf16(OPS[op], op) if HEADROOM_BF16 else OPS[op],
                               attrs))
        if self.loss not in defined:
            raise ExportError("the loss '%s' is not produced by any node" % self.loss)
        leaves = {n for n, t in export.tensors.items() if t.get("role") in LEAF_ROLES}
        drops = [[] for _ in self.nodes]
        for name, i in last_use.items():
            if name not in leaves and name != self.loss:
                drops[i].append(name)
        self.nodes = [(n, fn, a, d) for (n, fn, a), d in zip(self.nodes, drops)]

    def Forward(self, leaves):
        """Returns the loss tensor of one forward pass over `leaves`."""
        env = dict(leaves)
        for name in self.bf16_casts:
            env[name] = env[name].to(torch.bfloat16)
        for node, fn, attrs, drop in self.nodes:
            out = fn([env[name] for name in node["inputs"]], attrs, node)
            outs = out if isinstance(out, list) else [out]
            for name, value in zip(node["outputs"], outs):
                env[name] = value
            for name in drop:
                del env[name]
        return env[self.loss]


# ---- Training --------------------------------------------------------------------------


class Model:
    """The trainable state of an export: parameters (leaf tensors that require grad),
    buffers, and the optimizer over the parameters in the graph's tensor order."""

    def __init__(self, export, interpreter):
        self.export = export
        self.interpreter = interpreter
        state = export.ReadState()
        self.parameters = {n: state[n].requires_grad_(True) for n in export.Names("parameter")}
        self.buffers = {n: state[n] for n in export.Names("buffer")}
        self.optimizer = MakeOptimizer(export.optimizer, list(self.parameters.values()))

    def Step(self, batch):
        """Runs one training step on `batch`; returns (loss before the update, seconds of
        zero_grad + forward + backward + optimizer step)."""
        leaves = dict(self.parameters)
        leaves.update(self.buffers)
        leaves.update(batch)
        start = time.perf_counter()
        self.optimizer.zero_grad(set_to_none=False)
        # --autocast-bf16: PyTorch's own CPU mixed precision (torch.autocast), the reference
        # for Headroom's --precision bf16; off, the forward is float32 as exported.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=AUTOCAST_BF16):
            loss = self.interpreter.Forward(leaves)
        loss = loss.float()
        loss.backward()
        self.optimizer.step()
        seconds = time.perf_counter() - start
        return loss.item(), seconds

    def State(self):
        """Returns {name: tensor} of the parameters and buffers (detached)."""
        out = {n: p.detach() for n, p in self.parameters.items()}
        out.update(self.buffers)
        return out

    def PersistentBytes(self):
        """Returns {what: bytes} of the tensors held between steps (distinct storages)."""
        params = list(self.parameters.values())
        state_tensors = [v for s in self.optimizer.state.values() for v in s.values()
                         if torch.is_tensor(v)]
        return {"parameter_bytes": _DistinctBytes(params),
                "buffer_bytes": _DistinctBytes(self.buffers.values()),
                "gradient_bytes": _DistinctBytes(p.grad for p in params),
                "optimizer_state_bytes": _DistinctBytes(state_tensors)}


def MakeOptimizer(spec, params):
    """Returns the torch.optim optimizer that graph.json's "optimizer" describes."""
    kind = spec.get("kind")
    lr = spec["learning_rate"]
    weight_decay = spec.get("weight_decay", 0.0)
    if kind in ("sgd_momentum", "sgd"):
        return torch.optim.SGD(params, lr=lr, momentum=spec.get("momentum", 0.0),
                               weight_decay=weight_decay)
    if kind == "adam":
        return torch.optim.Adam(params, lr=lr, betas=(spec.get("beta1", 0.9),
                                                      spec.get("beta2", 0.999)),
                                eps=spec.get("epsilon", 1e-8), weight_decay=weight_decay)
    raise ExportError("optimizer kind '%s' is unknown; known: sgd_momentum, adam" % kind)


def _DistinctBytes(tensors):
    seen = {}
    for t in tensors:
        if t is not None:
            s = t.storage()
            seen[s.data_ptr()] = s.nbytes()
    return sum(seen.values())


def Train(export, interpreter, warmup_steps):
    """Returns (losses, step_seconds, model) of training from the initial state for every
    step, after `warmup_steps` untimed steps on a throwaway copy."""
    with export.OpenBatches() as f:
        if warmup_steps and export.steps:
            scratch = Model(export, interpreter)
            for i in range(warmup_steps):
                scratch.Step(export.ReadBatch(i % export.steps, f))
            del scratch
            gc.collect()
        model = Model(export, interpreter)
        losses, step_seconds = [], []
        for step in range(export.steps):
            loss, seconds = model.Step(export.ReadBatch(step, f))
            losses.append(loss)
            step_seconds.append(seconds)
    return losses, step_seconds, model


# ---- Peak memory of one step -----------------------------------------------------------


def MeasureMemory(export, interpreter):
    """Returns the memory of one training step as described in the module docstring."""
    prof = profile(activities=[ProfilerActivity.CPU], profile_memory=True)
    with export.OpenBatches() as f:
        prof.__enter__()
        try:
            model = Model(export, interpreter)
            model.Step(export.ReadBatch(0, f))  # Creates the gradients and optimizer state.
            gc.collect()
            persistent = model.PersistentBytes()
            measured = min(1, export.steps - 1)
            # Two marker blocks bracket the measured step; the first stays allocated until
            # the second exists, so no allocation in the step can reuse its address.
            start_mark = torch.empty(MARK_BYTES, dtype=torch.uint8)
            model.Step(export.ReadBatch(measured, f))
            end_mark = torch.empty(MARK_BYTES, dtype=torch.uint8)
            marks = (start_mark.data_ptr(), end_mark.data_ptr())
            del model, start_mark, end_mark
        finally:
            prof.__exit__(None, None, None)
    start_live, peak_step_bytes, peak_op, events = _ReplayAllocations(prof, *marks)
    persistent_bytes = sum(persistent.values())
    result = {
        "measured_step": measured,
        "persistent_bytes": persistent_bytes,
        "peak_step_bytes": peak_step_bytes,
        "peak_bytes": persistent_bytes + peak_step_bytes,
        "peak_op": peak_op,
        "live_at_step_start_bytes": start_live,
        "persistent_check": "ok" if start_live == persistent_bytes else
                            "MISMATCH (allocator %d, tensors %d)" % (start_live,
                                                                     persistent_bytes),
        "allocation_events": events,
    }
    result.update(persistent)
    return result


def _Requester(event):
    """Returns the name of the nearest op above an allocation that is not an allocation
    helper (None when there is none)."""
    p = event.parent
    while p is not None and p.name in ALLOCATION_HELPERS:
        p = p.parent
    return p.name if p is not None else None


def _ReplayAllocations(prof, start_mark_ptr, end_mark_ptr):
    """Returns (live bytes at the measured step's start, peak bytes of blocks allocated in
    the step and live, the op that made the allocation at that peak, number of events) from
    the profiler's CPU allocation events. The step lies between the last allocations at
    the two marker addresses. Blocks allocated before profiling began are ignored."""
    alloc_tag = torch._C._profiler._EventType.Allocation
    events = []  # (time ns, signed bytes, address, op)
    for e in WalkEvents(prof.profiler.kineto_results.experimental_event_tree()):
        if e.tag == alloc_tag and e.extra_fields.device.type == "cpu":
            f = e.extra_fields
            events.append((e.start_time_ns, f.alloc_size, f.ptr, _Requester(e)))
    events.sort(key=lambda r: r[0])

    def LastAllocationAt(ptr):
        times = [t for t, size, p, _ in events if p == ptr and size > 0]
        if not times:
            raise RuntimeError("the profiler recorded no allocation of the step's markers")
        return times[-1]

    t_start, t_end = LastAllocationAt(start_mark_ptr), LastAllocationAt(end_mark_ptr)
    live = {}  # ptr -> (bytes, allocated during the step)
    live_bytes, step_bytes, start_live, peak, peak_op = 0, 0, 0, 0, None
    for t, size, ptr, op in events:
        if t >= t_end:
            break
        if t == t_start and ptr == start_mark_ptr:  # The start marker: not counted.
            start_live = live_bytes
            continue
        inside = t >= t_start
        if size > 0:
            live[ptr] = (size, inside)
            live_bytes += size
            if inside:
                step_bytes += size
                if step_bytes > peak:
                    peak, peak_op = step_bytes, op
        elif ptr in live:
            size, was_inside = live.pop(ptr)
            live_bytes -= size
            step_bytes -= size if was_inside else 0
    return start_live, peak, peak_op, len(events)


# ---- Comparison with Headroom ----------------------------------------------------------


def Compare(export, losses, step_seconds, final_state, loss_rtol, loss_atol):
    """Returns the comparison with DIR/headroom.json (None when there is none); its "ok"
    is False when a loss is outside the tolerance or the step counts differ."""
    path = os.path.join(export.directory, "headroom.json")
    if not os.path.exists(path):
        return None
    try:
        with open(path) as f:
            headroom = json.load(f)
    except (OSError, ValueError) as e:
        raise ExportError("cannot read %s: %s" % (path, e))
    # Headroom writes a non-finite loss as null.
    theirs = [math.nan if x is None else float(x) for x in headroom.get("losses", [])]
    out = {"loss_rtol": loss_rtol, "loss_atol": loss_atol, "headroom_losses": theirs,
           "failures": []}
    if len(theirs) != len(losses):
        out["failures"].append("headroom.json has %d losses, torch ran %d steps"
                               % (len(theirs), len(losses)))
    diffs = []
    for step, (h, t) in enumerate(zip(theirs, losses)):
        diff = abs(h - t)
        diffs.append(diff)
        if not diff <= loss_rtol * abs(t) + loss_atol:  # Also catches NaN.
            out["failures"].append("step %d: headroom loss %.8g, torch %.8g, |diff| %.3g"
                                   % (step, h, t, diff))
    out["loss_abs_diffs"] = diffs
    out["max_loss_abs_diff"] = max(diffs) if diffs else None
    out.update(_CompareFinalState(export, headroom, final_state))
    theirs_seconds = [x for x in headroom.get("step_seconds") or [] if x is not None]
    if theirs_seconds and step_seconds:
        out["headroom_median_step_seconds"] = statistics.median(theirs_seconds)
        out["headroom_over_torch_step_time"] = (statistics.median(theirs_seconds)
                                                / statistics.median(step_seconds))
    out["ok"] = not out["failures"]
    return out


def _CompareFinalState(export, headroom, final_state):
    entries = {e["name"]: e for e in headroom.get("final_state", [])}
    if not entries or not os.path.exists(os.path.join(export.directory, "final_state.bin")):
        return {}
    unknown = [n for n in entries if n not in export.tensors]
    if unknown:
        raise ExportError("headroom.json final_state names unknown tensors: %s"
                          % ", ".join(unknown[:5]))
    theirs = export.ReadState("final_state.bin", entries)
    initial = export.ReadState()
    rel, update_rel = {}, {}
    for name, h in theirs.items():
        t = final_state[name].double()
        norm = t.norm().item()
        d = (h.double() - t).norm().item()
        rel[name] = d / norm if norm > 0 else d
        # Against what training moved the tensor: ||headroom - torch|| / ||torch - initial||
        # (after one step, the error of the first update, so of the first gradient).
        moved = (t - initial[name].double()).norm().item() if name in initial else 0
        if moved > 0:
            update_rel[name] = d / moved
    params = [n for n in rel if export.tensors[n]["role"] == "parameter"]
    worst = max(params, key=lambda n: rel[n]) if params else None
    moved_params = [n for n in params if n in update_rel]
    worst_update = max(moved_params, key=lambda n: update_rel[n]) if moved_params else None
    return {"final_parameter_max_rel_diff": rel[worst] if worst else None,
            "final_parameter_worst": worst,
            "final_state_rel_diffs": rel,
            "update_max_rel_diff": update_rel[worst_update] if worst_update else None,
            "update_median_rel_diff": (statistics.median(update_rel[n] for n in moved_params)
                                       if moved_params else None),
            "update_worst": worst_update,
            "update_rel_diffs": update_rel}


# ---- Command line ----------------------------------------------------------------------


def ParseArgs(argv):
    p = argparse.ArgumentParser(
        description="Train a Headroom export with PyTorch and compare with Headroom.")
    p.add_argument("dir", help="export directory (graph.json, state.bin, batches.bin)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="torch.set_num_threads (default: os.cpu_count())")
    p.add_argument("--warmup", type=int, default=1,
                   help="untimed steps on a throwaway copy of the state first (default 1)")
    p.add_argument("--json", metavar="OUT", help="write the results as one JSON object")
    p.add_argument("--loss-rtol", type=float, default=1e-3,
                   help="relative loss tolerance against headroom.json (default 1e-3)")
    p.add_argument("--loss-atol", type=float, default=1e-4,
                   help="absolute loss tolerance against headroom.json (default 1e-4)")
    p.add_argument("--autocast-bf16", action="store_true",
                   help="run the forward under torch.autocast('cpu', torch.bfloat16): "
                        "PyTorch's mixed precision, to hold Headroom's --precision bf16 against")
    p.add_argument("--headroom-bf16", action="store_true",
                   help="run the forward under Headroom's bf16 policy with PyTorch's kernels: "
                        "casts where graph::ToMixedPrecision casts, bf16 activations and "
                        "gradients, float32 master weights, norms' statistics and the loss")
    p.add_argument("--no-memory", action="store_true",
                   help="skip the profiled pass that measures peak memory")
    return p.parse_args(argv)


def PrintReport(export, result, out=sys.stdout):
    comparison = result.get("comparison")
    theirs = comparison["headroom_losses"] if comparison else []
    header = "%5s  %14s  %10s" % ("step", "loss", "seconds")
    if comparison:
        header += "  %14s  %10s" % ("headroom loss", "|diff|")
    print(header, file=out)
    for step, (loss, seconds) in enumerate(zip(result["losses"], result["step_seconds"])):
        line = "%5d  %14.7f  %10.4f" % (step, loss, seconds)
        if step < len(theirs):
            line += "  %14.7f  %10.3g" % (theirs[step], abs(theirs[step] - loss))
        print(line, file=out)
    print("\n%s: %d steps, %s optimizer, torch %s, %d threads" % (
        export.name, export.steps, export.optimizer.get("kind"), result["torch_version"],
        result["threads"]), file=out)
    if result["median_step_seconds"] is not None:
        print("median step: %.4f s" % result["median_step_seconds"], file=out)
    if "peak_bytes" in result:
        m = result["memory"]
        print("memory of step %d: peak %s = persistent %s (parameters %s, buffers %s, "
              "gradients %s, optimizer state %s) + step %s; at %s; persistent check: %s" % (
                  m["measured_step"], _Mib(result["peak_bytes"]),
                  _Mib(result["persistent_bytes"]), _Mib(m["parameter_bytes"]),
                  _Mib(m["buffer_bytes"]), _Mib(m["gradient_bytes"]),
                  _Mib(m["optimizer_state_bytes"]), _Mib(result["peak_step_bytes"]),
                  m["peak_op"], m["persistent_check"]), file=out)
    if comparison:
        print("headroom: max |loss diff| %s (tolerance %g * |torch| + %g)" % (
            "%.3g" % comparison["max_loss_abs_diff"]
            if comparison["max_loss_abs_diff"] is not None else "-",
            comparison["loss_rtol"], comparison["loss_atol"]), file=out)
        if comparison.get("final_parameter_worst"):
            print("headroom: final parameters max ||headroom - torch|| / ||torch|| = %.3g "
                  "('%s')" % (comparison["final_parameter_max_rel_diff"],
                              comparison["final_parameter_worst"]), file=out)
        if comparison.get("update_worst"):
            print("headroom: parameter updates ||headroom - torch|| / ||torch - initial||: "
                  "median %.3g, max %.3g ('%s')" % (comparison["update_median_rel_diff"],
                                                    comparison["update_max_rel_diff"],
                                                    comparison["update_worst"]), file=out)
        if "headroom_over_torch_step_time" in comparison:
            print("headroom: median step %.4f s, %.2fx torch's" % (
                comparison["headroom_median_step_seconds"],
                comparison["headroom_over_torch_step_time"]), file=out)
        for failure in comparison["failures"]:
            print("MISMATCH: " + failure, file=out)
        print("comparison: %s" % ("ok" if comparison["ok"] else "FAILED"), file=out)


def _Mib(n):
    return "{:,} B".format(n) if n < 2**20 else "%.1f MiB" % (n / 2**20)


def Run(args, out=sys.stdout):
    """Returns (exit status, result dict) of a run with parsed `args`."""
    global AUTOCAST_BF16, HEADROOM_BF16
    AUTOCAST_BF16 = getattr(args, "autocast_bf16", False)
    HEADROOM_BF16 = getattr(args, "headroom_bf16", False)
    if AUTOCAST_BF16 and HEADROOM_BF16:
        raise ExportError("--autocast-bf16 and --headroom-bf16 are two policies; give one")
    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(0)
    # warn_only: a CPU op without a deterministic kernel warns instead of failing.
    torch.use_deterministic_algorithms(True, warn_only=True)

    export = Export.Load(args.dir)
    interpreter = GraphInterpreter(export)
    losses, step_seconds, model = Train(export, interpreter, args.warmup)
    result = {
        "name": export.name,
        "losses": losses,
        "step_seconds": step_seconds,
        "median_step_seconds": statistics.median(step_seconds) if step_seconds else None,
        "threads": torch.get_num_threads(),
        "warmup_steps": args.warmup,
        "torch_version": torch.__version__,
    }
    final_state = model.State()
    del model
    gc.collect()
    if not args.no_memory and export.steps:
        memory = MeasureMemory(export, interpreter)
        result.update({k: memory[k] for k in ("peak_bytes", "peak_step_bytes",
                                              "persistent_bytes")})
        result["memory"] = memory
        result["memory_method"] = (
            "torch.profiler CPU allocation events in a separate pass from the initial state; "
            "step %d measured after one unmeasured step; persistent_bytes = parameters + "
            "buffers + gradients + optimizer state; peak_step_bytes = peak of bytes "
            "allocated during the step (batch load, zero_grad, forward, backward, "
            "optimizer.step) and still live; peak_bytes = persistent_bytes + peak_step_bytes"
            % memory["measured_step"])
    comparison = Compare(export, losses, step_seconds, final_state, args.loss_rtol,
                         args.loss_atol)
    if comparison is not None:
        result["comparison"] = comparison
    PrintReport(export, result, out)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    return (1 if comparison is not None and not comparison["ok"] else 0), result


def main(argv=None):
    args = ParseArgs(argv)
    try:
        status, _ = Run(args)
    except ExportError as e:
        print("error: %s" % e, file=sys.stderr)
        return 2
    return status


if __name__ == "__main__":
    sys.exit(main())
