"""graph_from_module: a PyTorch nn.Module as Headroom's training-graph description.

    import torchvision
    from headroom_client import write_graph
    from headroom_client.torch_graph import graph_from_module

    model = torchvision.models.resnet18(weights=None)
    graph = graph_from_module(model, torch.randn(32, 3, 224, 224), name="resnet18")
    write_graph(graph, "resnet18.pbtxt")   # headroom graph --graph resnet18.pbtxt

The module is traced with torch.fx (torch.nn modules are leaves, everything else is traced
through, so nn.Sequential and custom blocks nest freely) and run once on the example inputs
(in eval mode, without gradients, its training flags restored after) to learn every tensor's
shape. Each traced op becomes one of Headroom's ops (`headroom ops` lists them):

    nn.Conv2d                     Conv2D (zeros padding; 'same'/'valid' too)
    nn.ConvTranspose2d            ConvTranspose2D (zeros padding, output_padding, groups)
    nn.BatchNorm1d/2d             BatchNorm (affine, with running statistics)
    nn.Linear                     MatMul(x, weight, bias, transpose_b=true)
    nn.ReLU, F.relu, .relu()      ReLU (likewise ReLU6, Sigmoid, Tanh, GELU)
    nn.Hardswish, nn.Hardsigmoid  HardSwish, HardSigmoid (and F.hardswish, F.hardsigmoid)
    nn.LeakyReLU, nn.ELU, nn.SELU LeakyReLU, ELU, SELU (and F.leaky_relu, F.elu, F.selu)
    nn.Softplus, nn.Mish          Softplus (beta 1, threshold 20 only), Mish (and F.*)
    torch.sqrt, torch.erf         Sqrt, Erf
    nn.MaxPool2d, nn.AvgPool2d    MaxPool, AvgPool
    nn.Upsample, F.interpolate    Resize (4-D, 'nearest' or 'bilinear', size or scale_factor)
    nn.AdaptiveAvgPool2d          GlobalAvgPool for (1, 1); AvgPool where the sizes divide
    torch.flatten, nn.Flatten     Flatten (Reshape where the result is not 2-D)
    .view, .reshape               Reshape to the traced shape
    +, torch.add, *, torch.mul    Add, Mul (of two tensors)
    -, torch.sub, /, torch.div    Sub, Div (of two tensors; div without rounding_mode)
    **, torch.pow                 Pow (of a tensor to a constant exponent)
    torch.sum, .sum               ReduceSum (over dims or all of them; keepdim; no dtype)
    torch.amax, torch.amin        ReduceMax, ReduceMin (and .amax, .amin; ties share the
                                  gradient, as PyTorch's)
    torch.flip, .flip             Slice with step -1 along each flipped dim
    @, torch.matmul, .matmul      MatMul (batch dims broadcast; a 1-D operand through Reshape
                                  to a row or a column, as numpy's matmul)
    nn.PReLU                      PReLU (the slope [C] reshaped to [C, 1, ...] for channels)
    nn.Dropout, F.dropout         Dropout (nothing when p is 0 or training is off)
    nn.LayerNorm (last dim)       LayerNorm
    nn.GroupNorm (affine)         GroupNorm
    nn.InstanceNorm1d/2d          GroupNorm with a group per channel (affine, no running stats)
    nn.Softmax, F.softmax         Softmax
    nn.Embedding                  Embedding
    torch.cat                     Concat
    .permute, .transpose          Transpose
    nn.Identity, .contiguous      nothing: the output is the input

Anything else raises UnsupportedOpsError listing every unsupported op with its count.
Parameters become ROLE_PARAMETER leaves named as in module.named_parameters() (only those
the forward pass uses), batch-norm running statistics ROLE_BUFFER leaves, the forward
arguments ROLE_INPUT leaves named after them. Node outputs are listed with the traced shape,
so Headroom checks its shape inference against PyTorch's. The module's single output is the
logits the loss reads.
"""

import collections
import operator
import re

import torch
import torch.fx
import torch.nn.functional as F
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from headroom_client.protos import pb

_DTYPES = {
    torch.float32: pb.DTYPE_FLOAT32,
    torch.float16: pb.DTYPE_FLOAT16,
    torch.bfloat16: pb.DTYPE_BFLOAT16,
    torch.int32: pb.DTYPE_INT32,
    torch.int64: pb.DTYPE_INT64,
    torch.bool: pb.DTYPE_BOOL,
}

_LOSSES = ("softmax_cross_entropy",)


class UnsupportedOpsError(ValueError):
    """The module uses ops Headroom's op set lacks. `unsupported` maps each op's label
    ("nn.LSTM", "torch.sin", "Tensor.sum") to how many times the traced graph calls it."""

    def __init__(self, module_name, unsupported):
        self.unsupported = dict(unsupported)
        listing = ", ".join(f"{op} x{count}" for op, count in sorted(self.unsupported.items()))
        total = sum(self.unsupported.values())
        super().__init__(
            f"cannot convert '{module_name}' to a Headroom graph: {total} unsupported "
            f"op{'s' if total != 1 else ''} ({listing}); `headroom ops` lists the op set")


def graph_from_module(module, example_inputs, name=None, loss="softmax_cross_entropy",
                      classes=None):
    """Returns the GraphDef of training `module` on batches shaped like `example_inputs`.

    example_inputs: a tensor, or a tuple of tensors for a forward with several arguments;
      their shapes (batch included) and dtypes become the graph's inputs.
    name: the graph's name; default the module's class name, lower-cased.
    loss: "softmax_cross_entropy" (the only one): SoftmaxCrossEntropy of the module's output
      (logits [..., C]) against int64 labels [...] named "labels".
    classes: when given, the number of classes C the logits must have.

    Raises UnsupportedOpsError naming every op Headroom cannot express, ValueError for a
    module whose output cannot be the loss's logits.
    """
    if loss not in _LOSSES:
        raise ValueError(f"loss '{loss}' is not supported; one of {', '.join(_LOSSES)}")
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    name = name or type(module).__name__.lower()
    traced = _trace(module)
    _propagate_shapes(traced, module, example_inputs)
    converter = _Converter(traced, module, name)
    logits = converter.convert()
    converter.add_loss(logits, classes)
    return converter.graph


# ---- Tracing --------------------------------------------------------------------------------

class _ScopeTracer(torch.fx.Tracer):
    """torch.fx's default tracer that also records, in node.meta["scope"], the qualified
    name of the module whose forward created each node ("layer1.0" for a residual add)."""

    def __init__(self):
        super().__init__()
        self._scopes = [""]

    def call_module(self, m, forward, args, kwargs):
        self._scopes.append(self.path_of_module(m))
        try:
            return super().call_module(m, forward, args, kwargs)
        finally:
            self._scopes.pop()

    def create_node(self, *args, **kwargs):
        node = super().create_node(*args, **kwargs)
        node.meta["scope"] = self._scopes[-1]
        return node


def _trace(module):
    tracer = _ScopeTracer()
    try:
        graph = tracer.trace(module)
    except Exception as err:
        raise ValueError(
            f"torch.fx cannot trace {type(module).__name__}: {type(err).__name__}: {err}. "
            "Symbolic tracing needs forward() free of control flow on tensor values; with "
            "torch 1.13 on Python 3.11 it also cannot unpack a traced tuple "
            "(`out, state = self.lstm(x)`: index it instead)") from err
    return torch.fx.GraphModule(tracer.root, graph, type(module).__name__)


def _propagate_shapes(traced, module, example_inputs):
    """Runs `traced` once on the inputs, recording each node's tensor_meta; leaves every
    submodule's training flag as it was."""
    training = {m: m.training for m in module.modules()}
    try:
        module.eval()
        with torch.no_grad():
            ShapeProp(traced).propagate(*example_inputs)
    finally:
        for m, flag in training.items():
            m.training = flag


# ---- Labels for ops -------------------------------------------------------------------------

def _module_label(m):
    cls = type(m)
    if cls.__module__.startswith("torch.nn"):
        return f"nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _function_label(fn):
    module = getattr(fn, "__module__", None) or "torch"
    module = {"_operator": "operator", "torch.nn.functional": "F"}.get(module, module)
    return f"{module}.{getattr(fn, '__name__', repr(fn))}"


def _pair(value):
    return list(value) if isinstance(value, (tuple, list)) else [value, value]


# ---- Conversion -----------------------------------------------------------------------------

class _Unsupported(Exception):
    """Raised by a handler: the node's op (with `label`) has no Headroom equivalent."""

    def __init__(self, label):
        super().__init__(label)
        self.label = label


class _Converter:
    """Walks a shape-propagated fx graph once, in order, building `graph`. Call convert(),
    then add_loss(). Handlers are methods named by the op family; each reads the node's
    arguments and calls _emit() (or _alias()), or raises _Unsupported."""

    def __init__(self, traced, module, graph_name):
        self.traced = traced
        self.graph = pb.GraphDef(name=graph_name)
        self._module_name = graph_name
        self._modules = dict(traced.named_modules())
        # Shared parameters keep their first name, as module.parameters() counts them once.
        self._param_names = {id(p): n for n, p in module.named_parameters()}
        self._buffer_names = {id(b): n for n, b in module.named_buffers()}
        self._declared = set()        # Leaf tensors added so far.
        # Node and tensor names taken; parameter and buffer names are reserved up front.
        self._used_names = set(self._param_names.values()) | set(self._buffer_names.values())
        self._env = {}                # fx node -> Headroom tensor name.
        self._poisoned = set()        # fx nodes downstream of an unsupported op.
        self._unsupported = collections.Counter()
        self._module_handlers = self._make_module_handlers()
        self._function_handlers = self._make_function_handlers()
        self._method_handlers = self._make_method_handlers()

    # -- The handlers, by what the fx node calls --

    def _make_module_handlers(self):
        """(module types, handler(node, module)) pairs for call_module nodes."""
        return [
            (nn.Conv2d, self._conv2d),
            (nn.ConvTranspose2d, self._conv_transpose2d),
            ((nn.BatchNorm1d, nn.BatchNorm2d), self._batch_norm),
            (nn.Linear, self._linear),
            (nn.ReLU, lambda n, m: self._unary(n, "ReLU")),
            (nn.ReLU6, lambda n, m: self._unary(n, "ReLU6")),
            (nn.Sigmoid, lambda n, m: self._unary(n, "Sigmoid")),
            (nn.Tanh, lambda n, m: self._unary(n, "Tanh")),
            (nn.GELU, lambda n, m: self._unary(n, "GELU", approximate=m.approximate)),
            (nn.Hardswish, lambda n, m: self._unary(n, "HardSwish")),
            (nn.Hardsigmoid, lambda n, m: self._unary(n, "HardSigmoid")),
            (nn.LeakyReLU, lambda n, m: self._unary(n, "LeakyReLU", alpha=m.negative_slope)),
            (nn.ELU, lambda n, m: self._unary(n, "ELU", alpha=m.alpha)),
            (nn.SELU, lambda n, m: self._unary(n, "SELU")),
            (nn.Softplus, lambda n, m: self._softplus(n, m.beta, m.threshold)),
            (nn.Mish, lambda n, m: self._unary(n, "Mish")),
            (nn.PReLU, self._prelu),
            (nn.Upsample, lambda n, m: self._resize(
                n, m.mode, m.scale_factor, m.align_corners, m.recompute_scale_factor)),
            (nn.MaxPool2d, self._max_pool),
            (nn.AvgPool2d, self._avg_pool),
            (nn.AdaptiveAvgPool2d, lambda n, m: self._adaptive_avg_pool(n, m.output_size)),
            (nn.Flatten, lambda n, m: self._flatten(n, m.start_dim, m.end_dim)),
            (nn.Dropout, lambda n, m: self._dropout(n, m.p, True)),
            (nn.LayerNorm, self._layer_norm),
            (nn.GroupNorm, self._group_norm),
            ((nn.InstanceNorm1d, nn.InstanceNorm2d), self._instance_norm),
            (nn.Softmax, lambda n, m: self._softmax(n, m.dim)),
            (nn.Embedding, self._embedding),
            (nn.Identity, lambda n, m: self._alias(n)),
        ]

    def _make_function_handlers(self):
        """handler(node) by the function a call_function node calls."""
        return {
            F.relu: lambda n: self._unary(n, "ReLU"),
            torch.relu: lambda n: self._unary(n, "ReLU"),
            F.relu6: lambda n: self._unary(n, "ReLU6"),
            torch.sigmoid: lambda n: self._unary(n, "Sigmoid"),
            torch.tanh: lambda n: self._unary(n, "Tanh"),
            F.hardswish: lambda n: self._unary(n, "HardSwish"),
            F.hardsigmoid: lambda n: self._unary(n, "HardSigmoid"),
            F.leaky_relu: lambda n: self._unary(
                n, "LeakyReLU", alpha=self._arg(n, 1, "negative_slope", 0.01)),
            F.elu: lambda n: self._unary(n, "ELU", alpha=self._arg(n, 1, "alpha", 1.0)),
            F.selu: lambda n: self._unary(n, "SELU"),
            torch.selu: lambda n: self._unary(n, "SELU"),
            F.softplus: lambda n: self._softplus(n, self._arg(n, 1, "beta", 1),
                                                 self._arg(n, 2, "threshold", 20)),
            F.mish: lambda n: self._unary(n, "Mish"),
            torch.sqrt: lambda n: self._unary(n, "Sqrt"),
            torch.erf: lambda n: self._unary(n, "Erf"),
            F.gelu: lambda n: self._unary(n, "GELU", approximate=self._arg(n, 1, "approximate",
                                                                           "none")),
            F.interpolate: lambda n: self._resize(
                n, self._arg(n, 3, "mode", "nearest"), self._arg(n, 2, "scale_factor"),
                self._arg(n, 4, "align_corners"), self._arg(n, 5, "recompute_scale_factor"),
                self._arg(n, 6, "antialias", False)),
            F.adaptive_avg_pool2d: lambda n: self._adaptive_avg_pool(
                n, self._arg(n, 1, "output_size")),
            torch.flatten: lambda n: self._flatten(n, self._arg(n, 1, "start_dim", 0),
                                                   self._arg(n, 2, "end_dim", -1)),
            torch.reshape: self._reshape,
            operator.add: lambda n: self._binary(n, "Add"),
            operator.iadd: lambda n: self._binary(n, "Add"),
            torch.add: lambda n: self._binary(n, "Add"),
            operator.mul: lambda n: self._binary(n, "Mul"),
            operator.imul: lambda n: self._binary(n, "Mul"),
            torch.mul: lambda n: self._binary(n, "Mul"),
            operator.sub: lambda n: self._binary(n, "Sub"),
            operator.isub: lambda n: self._binary(n, "Sub"),
            torch.sub: lambda n: self._binary(n, "Sub"),
            operator.truediv: lambda n: self._binary(n, "Div"),
            operator.itruediv: lambda n: self._binary(n, "Div"),
            torch.div: lambda n: self._binary(n, "Div"),
            operator.pow: self._pow,
            torch.pow: self._pow,
            F.dropout: lambda n: self._dropout(n, self._arg(n, 1, "p", 0.5),
                                               self._arg(n, 2, "training", True)),
            F.softmax: lambda n: self._softmax(n, self._arg(n, 1, "dim")),
            torch.softmax: lambda n: self._softmax(n, self._arg(n, 1, "dim")),
            torch.cat: self._concat,
            torch.sum: lambda n: self._reduce(n, "ReduceSum"),
            torch.amax: lambda n: self._reduce(n, "ReduceMax"),
            torch.amin: lambda n: self._reduce(n, "ReduceMin"),
            torch.flip: lambda n: self._flip(n, self._arg(n, 1, "dims")),
            operator.matmul: self._matmul,
            torch.matmul: self._matmul,
            torch.permute: lambda n: self._permute(n, self._arg(n, 1, "dims")),
            torch.transpose: lambda n: self._transpose(n),
        }

    def _make_method_handlers(self):
        """handler(node) by the tensor method a call_method node calls."""
        return {
            "relu": lambda n: self._unary(n, "ReLU"),
            "relu_": lambda n: self._unary(n, "ReLU"),
            "sigmoid": lambda n: self._unary(n, "Sigmoid"),
            "tanh": lambda n: self._unary(n, "Tanh"),
            "flatten": lambda n: self._flatten(n, self._arg(n, 1, "start_dim", 0),
                                               self._arg(n, 2, "end_dim", -1)),
            "view": self._reshape,
            "reshape": self._reshape,
            "add": lambda n: self._binary(n, "Add"),
            "add_": lambda n: self._binary(n, "Add"),
            "mul": lambda n: self._binary(n, "Mul"),
            "mul_": lambda n: self._binary(n, "Mul"),
            "sub": lambda n: self._binary(n, "Sub"),
            "sub_": lambda n: self._binary(n, "Sub"),
            "div": lambda n: self._binary(n, "Div"),
            "div_": lambda n: self._binary(n, "Div"),
            "pow": self._pow,
            "softmax": lambda n: self._softmax(n, self._arg(n, 1, "dim")),
            "permute": lambda n: self._permute(n, self._method_dims(n)),
            "transpose": lambda n: self._transpose(n),
            "contiguous": self._alias,
            "sum": lambda n: self._reduce(n, "ReduceSum"),
            "amax": lambda n: self._reduce(n, "ReduceMax"),
            "amin": lambda n: self._reduce(n, "ReduceMin"),
            "flip": lambda n: self._flip(n, self._method_dims(n)),
            "matmul": self._matmul,
        }

    # -- The walk --

    def convert(self):
        """Returns the name of the logits tensor (the module's output) once every node is
        converted; raises UnsupportedOpsError listing what could not be."""
        logits = None
        for node in self.traced.graph.nodes:
            if node.op == "output":
                logits = node.args[0]
                continue
            if self._is_shape_arithmetic(node):
                continue  # size(), .shape and int maths: reshape targets read traced shapes.
            if node.op == "call_function" and node.target is operator.getitem and \
                    self._inputs_poisoned(node):
                self._poisoned.add(node)  # Unpacking an unsupported op's tuple: counted there.
                continue
            try:
                self._convert_node(node)
            except _Unsupported as err:
                self._unsupported[err.label] += 1
                self._poisoned.add(node)
        if self._unsupported:
            raise UnsupportedOpsError(self._module_name, self._unsupported)
        if not isinstance(logits, torch.fx.Node) or logits not in self._env:
            raise ValueError(f"'{self._module_name}' must return one tensor, the logits; it "
                             f"returns {logits!r}")
        return self._env[logits]

    def add_loss(self, logits, classes):
        """Adds int64 "labels" [logits.shape[:-1]] and the scalar "loss" node."""
        shape = list(self._leaf_or_activation_shape(logits))
        if len(shape) < 2:
            raise ValueError(f"the output '{logits}' has shape {shape}; softmax cross entropy "
                             "needs logits [..., classes]")
        if classes is not None and shape[-1] != classes:
            raise ValueError(f"the output '{logits}' has {shape[-1]} classes (shape {shape}), "
                             f"not {classes}")
        labels = self._unique("labels")
        self.graph.tensors.add(name=labels, shape=shape[:-1], dtype=pb.DTYPE_INT64,
                               role=pb.ROLE_LABEL, doc="class indices")
        loss = self._unique("loss")
        self.graph.nodes.add(name=loss, op="SoftmaxCrossEntropy", inputs=[logits, labels],
                             outputs=[loss])
        self.graph.loss = loss

    def _convert_node(self, node):
        if node.op == "placeholder":
            self._placeholder(node)
        elif node.op == "get_attr":
            self._get_attr(node)
        elif node.op == "call_module":
            module = self._modules[node.target]
            for types, handler in self._module_handlers:
                if type(module) in (types if isinstance(types, tuple) else (types,)):
                    return handler(node, module)
            raise _Unsupported(_module_label(module))
        elif node.op == "call_function":
            handler = self._function_handlers.get(node.target)
            if handler is None:
                raise _Unsupported(_function_label(node.target))
            handler(node)
        elif node.op == "call_method":
            handler = self._method_handlers.get(node.target)
            if handler is None:
                raise _Unsupported(f"Tensor.{node.target}")
            handler(node)
        else:
            raise _Unsupported(f"fx '{node.op}' node")

    # -- Helpers --

    def _is_shape_arithmetic(self, node):
        """Returns whether `node` computes no tensor (x.size(0), x.shape, their int maths)."""
        if node.op not in ("call_function", "call_method") or "tensor_meta" in node.meta:
            return False
        return node.meta.get("type") in (int, torch.Size, tuple, float)

    def _inputs_poisoned(self, node):
        return any(a in self._poisoned for a in node.all_input_nodes)

    def _unique(self, base):
        name, k = base, 0
        while name in self._used_names:
            k += 1
            name = f"{base}_{k}"
        self._used_names.add(name)
        return name

    def _node_name(self, node):
        """Returns a unique name for `node`: its module's qualified name for a module call,
        else "<scope>.<function>" ("layer1.0.add", "flatten")."""
        if node.op == "call_module":
            return self._unique(node.target)
        base = re.sub(r"_\d+$", "", node.name)
        scope = node.meta.get("scope", "")
        return self._unique(f"{scope}.{base}" if scope else base)

    def _meta(self, node):
        meta = node.meta.get("tensor_meta")
        if meta is None or not hasattr(meta, "shape"):
            raise _Unsupported(f"{node.op} '{node.target}' not returning one tensor")
        return meta

    def _leaf_or_activation_shape(self, tensor_name):
        for t in self.graph.tensors:
            if t.name == tensor_name:
                return t.shape
        raise AssertionError(f"tensor '{tensor_name}' was never declared")

    def _dtype(self, torch_dtype, what):
        dtype = _DTYPES.get(torch_dtype)
        if dtype is None:
            raise _Unsupported(f"{what} of dtype {torch_dtype}")
        return dtype

    def _arg(self, node, index, keyword, default=None):
        """Returns argument `index` (or `keyword`) of a function or method call."""
        if index < len(node.args):
            return node.args[index]
        return node.kwargs.get(keyword, default)

    def _input(self, node, index=0, keyword="input"):
        """Returns the Headroom tensor name of the node's tensor argument `index`."""
        arg = self._arg(node, index, keyword)
        if not isinstance(arg, torch.fx.Node):
            raise _Unsupported(f"{self._label(node)} of a constant")
        if arg in self._poisoned:
            return f"<{arg.name}>"  # The error will be raised for the unsupported producer.
        return self._env[arg]

    def _label(self, node):
        if node.op == "call_module":
            return _module_label(self._modules[node.target])
        if node.op == "call_method":
            return f"Tensor.{node.target}"
        return _function_label(node.target)

    def _in_shape(self, node, index=0):
        return list(self._meta(node.args[index]).shape)

    def _leaf(self, name, tensor, role, doc):
        """Declares a parameter, buffer or input leaf once; returns its name."""
        if name not in self._declared:
            self._declared.add(name)
            self.graph.tensors.add(name=name, shape=list(tensor.shape),
                                   dtype=self._dtype(tensor.dtype, name), role=role, doc=doc)
        return name

    def _parameter(self, tensor, doc="parameter"):
        return self._leaf(self._param_names[id(tensor)], tensor, pb.ROLE_PARAMETER, doc)

    def _buffer(self, tensor, doc="buffer"):
        return self._leaf(self._buffer_names[id(tensor)], tensor, pb.ROLE_BUFFER, doc)

    def _emit(self, node, op, inputs, **attrs):
        """Adds node `op` reading `inputs`, its output listed with the traced shape."""
        meta = self._meta(node)
        name = self._node_name(node)
        nd = self.graph.nodes.add(name=name, op=op, inputs=inputs, outputs=[name])
        for key, value in attrs.items():
            _set_attr(nd.attrs[key], value)
        self.graph.tensors.add(name=name, shape=list(meta.shape),
                               dtype=self._dtype(meta.dtype, name), role=pb.ROLE_ACTIVATION,
                               doc=self._label(node))
        self._env[node] = name

    def _alias(self, node, *unused):
        """The node's output is its input (identity, dropout that drops nothing)."""
        self._env[node] = self._input(node)

    # -- Leaves --

    def _placeholder(self, node):
        meta = self._meta(node)
        name = self._unique(node.name)
        self._declared.add(name)
        self.graph.tensors.add(name=name, shape=list(meta.shape),
                               dtype=self._dtype(meta.dtype, name), role=pb.ROLE_INPUT,
                               doc=f"forward argument '{node.target}'")
        self._env[node] = name

    def _get_attr(self, node):
        value = self.traced
        for part in node.target.split("."):
            value = getattr(value, part)
        if isinstance(value, nn.Parameter) and id(value) in self._param_names:
            self._env[node] = self._parameter(value)
        elif isinstance(value, torch.Tensor) and id(value) in self._buffer_names:
            self._env[node] = self._buffer(value)
        else:
            raise _Unsupported("constant tensor (get_attr)")

    # -- Layers --

    def _conv2d(self, node, m):
        if m.padding_mode != "zeros":
            raise _Unsupported(f"nn.Conv2d(padding_mode='{m.padding_mode}')")
        if m.padding == "valid":
            padding = [0, 0]
        elif m.padding == "same":
            # PyTorch puts the odd pixel of 'same' padding at the bottom and right.
            total = [d * (k - 1) for d, k in zip(m.dilation, m.kernel_size)]
            padding = [total[0] // 2, total[1] // 2, total[0] - total[0] // 2,
                       total[1] - total[1] // 2]
        else:
            padding = _pair(m.padding)
        inputs = [self._input(node), self._parameter(m.weight, "Conv2d weight")]
        if m.bias is not None:
            inputs.append(self._parameter(m.bias, "Conv2d bias"))
        self._emit(node, "Conv2D", inputs, stride=_pair(m.stride), padding=padding,
                   dilation=_pair(m.dilation), groups=m.groups)

    def _conv_transpose2d(self, node, m):
        if m.padding_mode != "zeros":
            raise _Unsupported(f"nn.ConvTranspose2d(padding_mode='{m.padding_mode}')")
        inputs = [self._input(node), self._parameter(m.weight, "ConvTranspose2d weight")]
        if m.bias is not None:
            inputs.append(self._parameter(m.bias, "ConvTranspose2d bias"))
        # A forward given output_size picks its own output padding: the traced shape says.
        out = list(self._meta(node).shape)
        x = self._in_shape(node)
        stride, padding, dilation = _pair(m.stride), _pair(m.padding), _pair(m.dilation)
        kernel = _pair(m.kernel_size)
        output_padding = [out[2 + d] - ((x[2 + d] - 1) * stride[d] - 2 * padding[d] +
                                        dilation[d] * (kernel[d] - 1) + 1) for d in range(2)]
        self._emit(node, "ConvTranspose2D", inputs, stride=stride, padding=padding,
                   output_padding=output_padding, dilation=dilation, groups=m.groups)

    def _resize(self, node, mode, scale_factor, align_corners, recompute_scale_factor,
                antialias=False):
        """F.interpolate and nn.Upsample of x[N, C, H, W]: the output size is the traced one
        (size given as numbers or through x.shape); a constant scale_factor is kept, as
        PyTorch uses it for the source coordinates unless recompute_scale_factor is set."""
        label = self._label(node)
        if len(self._in_shape(node)) != 4:
            raise _Unsupported(f"{label} of a tensor of {len(self._in_shape(node))} dims")
        if mode not in ("nearest", "bilinear"):
            raise _Unsupported(f"{label}(mode='{mode}')")
        if antialias:
            raise _Unsupported(f"{label}(antialias=True)")
        attrs = {"size": list(self._meta(node).shape)[2:], "mode": mode}
        if mode == "bilinear":
            attrs["align_corners"] = bool(align_corners)
        if scale_factor is not None and not recompute_scale_factor:
            if isinstance(scale_factor, torch.fx.Node):
                raise _Unsupported(f"{label}(a computed scale_factor)")
            scales = _pair(scale_factor)
            attrs["scale_h"], attrs["scale_w"] = float(scales[0]), float(scales[1])
        self._emit(node, "Resize", [self._input(node)], **attrs)

    def _batch_norm(self, node, m):
        label = _module_label(m)
        if not m.affine:
            raise _Unsupported(f"{label}(affine=False)")
        if not m.track_running_stats or m.running_mean is None:
            raise _Unsupported(f"{label}(track_running_stats=False)")
        if m.momentum is None:
            raise _Unsupported(f"{label}(momentum=None)")
        if len(self._in_shape(node)) not in (2, 4):
            raise _Unsupported(f"{label} of a {len(self._in_shape(node))}-D input")
        inputs = [self._input(node), self._parameter(m.weight), self._parameter(m.bias),
                  self._buffer(m.running_mean, "running mean"),
                  self._buffer(m.running_var, "running variance")]
        self._emit(node, "BatchNorm", inputs, epsilon=float(m.eps), momentum=float(m.momentum))

    def _linear(self, node, m):
        if len(self._in_shape(node)) < 2:
            raise _Unsupported("nn.Linear of a 1-D input")
        inputs = [self._input(node), self._parameter(m.weight, "Linear weight [out, in]")]
        if m.bias is not None:
            inputs.append(self._parameter(m.bias, "Linear bias"))
        self._emit(node, "MatMul", inputs, transpose_b=True)

    def _layer_norm(self, node, m):
        if len(m.normalized_shape) != 1 or not m.elementwise_affine:
            raise _Unsupported("nn.LayerNorm over several dims or without affine")
        self._emit(node, "LayerNorm",
                   [self._input(node), self._parameter(m.weight), self._parameter(m.bias)],
                   epsilon=float(m.eps))

    def _group_norm(self, node, m):
        if not m.affine:
            raise _Unsupported("nn.GroupNorm(affine=False)")
        self._emit(node, "GroupNorm",
                   [self._input(node), self._parameter(m.weight), self._parameter(m.bias)],
                   num_groups=int(m.num_groups), epsilon=float(m.eps))

    def _instance_norm(self, node, m):
        """InstanceNorm is GroupNorm with a group per channel (batch statistics only)."""
        label = self._label(node)
        if not m.affine or m.track_running_stats:
            raise _Unsupported(f"{label}(affine=False or track_running_stats=True)")
        if len(self._in_shape(node)) < 3:
            raise _Unsupported(f"{label} of an input without a batch dimension")
        self._emit(node, "GroupNorm",
                   [self._input(node), self._parameter(m.weight), self._parameter(m.bias)],
                   num_groups=int(m.num_features), epsilon=float(m.eps))

    def _embedding(self, node, m):
        if m.padding_idx is not None or m.max_norm is not None:
            raise _Unsupported("nn.Embedding(padding_idx or max_norm)")
        self._emit(node, "Embedding", [self._input(node), self._parameter(m.weight)])

    # -- Elementwise and pooling --

    def _unary(self, node, op, **attrs):
        self._emit(node, op, [self._input(node)], **attrs)

    def _softplus(self, node, beta, threshold):
        """Headroom's Softplus is PyTorch's at beta 1, threshold 20."""
        if beta != 1 or threshold != 20:
            raise _Unsupported(f"{self._label(node)}(beta != 1 or threshold != 20)")
        self._unary(node, "Softplus")

    def _binary(self, node, op):
        if node.kwargs.get("alpha", 1) != 1:
            raise _Unsupported(f"{self._label(node)}(alpha != 1)")
        if node.kwargs.get("rounding_mode") is not None:
            raise _Unsupported(f"{self._label(node)}(rounding_mode)")
        a = self._input(node, 0, "input")
        b = self._input(node, 1, "other")
        self._emit(node, op, [a, b])

    def _pow(self, node):
        """x ** c of a traced tensor and a constant c; a traced exponent is unsupported."""
        exponent = self._arg(node, 1, "exponent")
        if isinstance(exponent, torch.fx.Node) or not isinstance(exponent, (int, float)):
            raise _Unsupported(f"{self._label(node)}(a tensor exponent)")
        self._emit(node, "Pow", [self._input(node, 0, "input")], exponent=float(exponent))

    def _reduce(self, node, op):
        """torch.sum, amax or amin over `dim` (an int, a list, or none for every dim)."""
        if node.kwargs.get("dtype") is not None:
            raise _Unsupported(f"{self._label(node)}(dtype)")
        dim = self._arg(node, 1, "dim", None)
        keepdim = self._arg(node, 2, "keepdim", False)
        if not isinstance(keepdim, bool) or not (dim is None or isinstance(dim, (int, list, tuple))):
            raise _Unsupported(f"{self._label(node)} with traced dim or keepdim")
        axes = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
        attrs = {"keepdims": keepdim}
        if axes:
            attrs["axes"] = axes
        self._emit(node, op, [self._input(node)], **attrs)

    def _flip(self, node, dims):
        """torch.flip: each dim read from its last element through its first (step -1)."""
        shape = self._in_shape(node)
        axes = [d + len(shape) if d < 0 else d for d in ([dims] if isinstance(dims, int)
                                                         else list(dims))]
        if not axes:
            return self._alias(node)
        self._emit(node, "Slice", [self._input(node)], axes=axes,
                   starts=[shape[d] - 1 for d in axes], ends=[-1] * len(axes),
                   steps=[-1] * len(axes))

    def _matmul(self, node):
        """torch.matmul with numpy's rules: batch dims broadcast (Headroom's MatMul does that),
        a 1-D a is a row [1, K] and a 1-D b a column [K, 1], reshaped back after."""
        a = self._input(node, 0, "input")
        b = self._input(node, 1, "other")
        a_shape, b_shape = self._in_shape(node, 0), self._in_shape(node, 1)
        if len(a_shape) == 0 or len(b_shape) == 0 or (len(a_shape) == 1 and len(b_shape) == 1):
            raise _Unsupported(f"{self._label(node)} of a scalar or of two vectors")
        if len(a_shape) >= 2 and len(b_shape) >= 2:
            return self._emit(node, "MatMul", [a, b])
        name = self._node_name(node)
        if len(a_shape) == 1:
            a = self._reshape_to(f"{name}.row", a, [1, a_shape[0]], "a vector as a row")
        if len(b_shape) == 1:
            b = self._reshape_to(f"{name}.column", b, [b_shape[0], 1], "a vector as a column")
        a_full = [1, a_shape[0]] if len(a_shape) == 1 else a_shape
        b_full = [b_shape[0], 1] if len(b_shape) == 1 else b_shape
        batch = list(torch.broadcast_shapes(torch.Size(a_full[:-2]), torch.Size(b_full[:-2])))
        product = self._unique(f"{name}.matrix")
        self.graph.nodes.add(name=product, op="MatMul", inputs=[a, b], outputs=[product])
        self.graph.tensors.add(name=product, shape=batch + [a_full[-2], b_full[-1]],
                               dtype=pb.DTYPE_FLOAT32, role=pb.ROLE_ACTIVATION,
                               doc=self._label(node))
        self._emit(node, "Reshape", [product], shape=list(self._meta(node).shape))

    def _reshape_to(self, base, tensor, shape, doc):
        """Adds a Reshape of `tensor` to `shape`; returns its output's name."""
        name = self._unique(base)
        nd = self.graph.nodes.add(name=name, op="Reshape", inputs=[tensor], outputs=[name])
        _set_attr(nd.attrs["shape"], shape)
        self.graph.tensors.add(name=name, shape=shape, dtype=pb.DTYPE_FLOAT32,
                               role=pb.ROLE_ACTIVATION, doc=doc)
        return name

    def _prelu(self, node, m):
        """PReLU; a slope per channel [C] is reshaped to [C, 1, ...] to broadcast over axis 1
        of x[N, C, ...], as torch applies it."""
        slope = self._parameter(m.weight, "PReLU slope")
        rank = len(self._in_shape(node))
        if m.weight.numel() > 1 and rank > 2:
            name = self._unique(f"{node.target}.slope")
            shape = [m.weight.numel()] + [1] * (rank - 2)
            nd = self.graph.nodes.add(name=name, op="Reshape", inputs=[slope], outputs=[name])
            _set_attr(nd.attrs["shape"], shape)
            self.graph.tensors.add(name=name, shape=shape, dtype=pb.DTYPE_FLOAT32,
                                   role=pb.ROLE_ACTIVATION, doc=f"{node.target} slope per channel")
            slope = name
        self._emit(node, "PReLU", [self._input(node), slope])

    def _dropout(self, node, p, training):
        if not training or p == 0:
            return self._alias(node)
        self._emit(node, "Dropout", [self._input(node)], rate=float(p))

    def _max_pool(self, node, m):
        if _pair(m.dilation) != [1, 1] or m.return_indices:
            raise _Unsupported("nn.MaxPool2d(dilation or return_indices)")
        self._emit(node, "MaxPool", [self._input(node)], kernel_size=_pair(m.kernel_size),
                   stride=_pair(m.stride or m.kernel_size), padding=_pair(m.padding),
                   ceil_mode=bool(m.ceil_mode))

    def _avg_pool(self, node, m):
        if m.divisor_override is not None:
            raise _Unsupported("nn.AvgPool2d(divisor_override)")
        self._emit(node, "AvgPool", [self._input(node)], kernel_size=_pair(m.kernel_size),
                   stride=_pair(m.stride or m.kernel_size), padding=_pair(m.padding),
                   ceil_mode=bool(m.ceil_mode), count_include_pad=bool(m.count_include_pad))

    def _adaptive_avg_pool(self, node, output_size):
        shape = self._in_shape(node)
        out = [s if s is not None else shape[2 + i] for i, s in enumerate(_pair(output_size))]
        if out == [1, 1]:
            return self._emit(node, "GlobalAvgPool", [self._input(node)])
        if out == shape[2:]:
            return self._alias(node)
        if len(shape) != 4 or shape[2] % out[0] or shape[3] % out[1]:
            raise _Unsupported(f"{self._label(node)} to a size not dividing the input")
        kernel = [shape[2] // out[0], shape[3] // out[1]]
        self._emit(node, "AvgPool", [self._input(node)], kernel_size=kernel, stride=kernel)

    # -- Shapes --

    def _flatten(self, node, start_dim, end_dim):
        shape = self._in_shape(node)
        out = list(self._meta(node).shape)
        axis = start_dim + len(shape) if start_dim < 0 else start_dim
        # Headroom's Flatten(axis) makes [prod(dims before axis), prod(the rest)].
        if 0 < axis < len(shape) and out == [_prod(shape[:axis]), _prod(shape[axis:])]:
            return self._emit(node, "Flatten", [self._input(node)], axis=axis)
        self._emit(node, "Reshape", [self._input(node)], shape=out)

    def _reshape(self, node):
        self._emit(node, "Reshape", [self._input(node)], shape=list(self._meta(node).shape))

    def _softmax(self, node, dim):
        if not isinstance(dim, int):
            raise _Unsupported(f"{self._label(node)} without an int dim")
        self._emit(node, "Softmax", [self._input(node)], axis=dim)

    def _concat(self, node):
        tensors = self._arg(node, 0, "tensors")
        dim = self._arg(node, 1, "dim", 0)
        if not all(isinstance(t, torch.fx.Node) for t in tensors):
            raise _Unsupported("torch.cat of constants")
        inputs = [f"<{t.name}>" if t in self._poisoned else self._env[t] for t in tensors]
        self._emit(node, "Concat", inputs, axis=dim)

    def _method_dims(self, node):
        dims = node.args[1:]
        return list(dims[0]) if len(dims) == 1 and isinstance(dims[0], (tuple, list)) \
            else list(dims)

    def _permute(self, node, dims):
        rank = len(self._in_shape(node))
        self._emit(node, "Transpose", [self._input(node)],
                   perm=[d + rank if d < 0 else d for d in dims])

    def _transpose(self, node):
        rank = len(self._in_shape(node))
        a, b = (d + rank if d < 0 else d for d in (self._arg(node, 1, "dim0"),
                                                    self._arg(node, 2, "dim1")))
        perm = list(range(rank))
        perm[a], perm[b] = perm[b], perm[a]
        self._emit(node, "Transpose", [self._input(node)], perm=perm)


def _prod(values):
    result = 1
    for v in values:
        result *= v
    return result


def _set_attr(attr, value):
    """Sets an AttrValue from a Python bool, int, float, str or list of ints."""
    if isinstance(value, bool):
        attr.b = value
    elif isinstance(value, int):
        attr.i = value
    elif isinstance(value, float):
        attr.f = value
    elif isinstance(value, str):
        attr.s = value
    else:
        attr.ints.values.extend(int(v) for v in value)
