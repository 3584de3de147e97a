#!/usr/bin/python3
"""Tests of tools/torch_reference.py on tiny export directories written by hand.

Run with Debian's interpreter: /usr/bin/python3 tools/torch_reference_test.py
"""

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch_reference as ref  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_reference.py")
DTYPE_NAMES = {v: k for k, v in ref.DTYPES.items()}


class ExportBuilder:
    """Writes an export directory: graph.json, state.bin, batches.bin (and optionally a
    headroom.json with final_state.bin), the way `headroom train --export` lays it out."""

    def __init__(self, name, steps, optimizer):
        self.graph = {"name": name, "loss": "loss", "tensors": [], "nodes": [],
                      "optimizer": optimizer, "steps": steps}
        self.state = {}    # name -> tensor
        self.batches = []  # [{name: tensor}] per step

    def Tensor(self, name, shape, role, dtype=torch.float32, value=None):
        self.graph["tensors"].append({"name": name, "shape": list(shape),
                                      "dtype": DTYPE_NAMES[dtype], "role": role})
        if value is not None:
            self.state[name] = value.to(dtype).reshape(shape).contiguous()
        return name

    def Node(self, op, inputs, outputs, **attrs):
        outputs = [outputs] if isinstance(outputs, str) else outputs
        for out in outputs:
            self.graph["tensors"].append({"name": out, "shape": [], "dtype": "float32",
                                          "role": "activation"})
        self.graph["nodes"].append({"name": outputs[0], "op": op, "inputs": list(inputs),
                                    "outputs": outputs, "attrs": attrs})
        return outputs[0]

    def Write(self, directory):
        self.graph["state"] = _WriteBlobs(os.path.join(directory, "state.bin"),
                                          list(self.state.items()))
        entries = _WriteBlobs(os.path.join(directory, "batches.bin"),
                              [(n, t) for b in self.batches for n, t in b.items()])
        steps = [s for s, b in enumerate(self.batches) for _ in b]
        self.graph["batches"] = [dict(e, step=s) for e, s in zip(entries, steps)]
        with open(os.path.join(directory, "graph.json"), "w") as f:
            json.dump(self.graph, f)
        return directory


def _WriteBlobs(path, named_tensors):
    entries, offset = [], 0
    with open(path, "wb") as f:
        for name, t in named_tensors:
            data = t.contiguous().view(-1).view(torch.uint8).numpy().tobytes()
            f.write(data)
            entries.append({"name": name, "offset_bytes": offset, "bytes": len(data)})
            offset += len(data)
    return entries


def WriteHeadroomResults(directory, losses, final_state):
    """Writes a fake headroom.json (and final_state.bin) with `losses`."""
    entries = _WriteBlobs(os.path.join(directory, "final_state.bin"), list(final_state.items()))
    with open(os.path.join(directory, "headroom.json"), "w") as f:
        json.dump({"losses": losses, "step_seconds": [0.01] * len(losses),
                   "final_state": entries}, f)


SGD = {"kind": "sgd_momentum", "learning_rate": 0.1, "momentum": 0.9, "beta1": 0.9,
       "beta2": 0.999, "epsilon": 1e-8, "weight_decay": 1e-4}
ADAM = dict(SGD, kind="adam", learning_rate=0.01, weight_decay=0.0)


def TeacherBatches(steps, batch, make_x, classes, label_dtype, seed=1):
    """[{"x": ..., "labels": ...}] per step: two batches, taken in turn, whose labels a
    fixed random linear teacher picks, so that ten steps can learn them."""
    g = torch.Generator().manual_seed(seed)
    xs = [make_x(g), make_x(g)]
    teacher = torch.randn(xs[0][0].numel(), classes, generator=g)
    pool = [{"x": x, "labels": (x.reshape(batch, -1) @ teacher).argmax(dim=1).to(label_dtype)}
            for x in xs]
    return [pool[s % 2] for s in range(steps)]


def BuildMlp(steps=10, optimizer=SGD):
    """x[8,16] -> MatMul(w1^T) -> Add(b1) -> ReLU -> MatMul(w2^T, b2) -> SoftmaxCrossEntropy
    with int32 labels; returns (builder, the equivalent nn.Module)."""
    torch.manual_seed(2)
    module = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    b = ExportBuilder("mlp", steps, optimizer)
    b.Tensor("x", [8, 16], "input")
    b.Tensor("labels", [8], "label", torch.int32)
    w1 = b.Tensor("fc1.weight", [32, 16], "parameter", value=module[0].weight.detach())
    b1 = b.Tensor("fc1.bias", [32], "parameter", value=module[0].bias.detach())
    w2 = b.Tensor("fc2.weight", [4, 32], "parameter", value=module[2].weight.detach())
    b2 = b.Tensor("fc2.bias", [4], "parameter", value=module[2].bias.detach())
    h = b.Node("MatMul", ["x", w1], "fc1.mm", transpose_a=False, transpose_b=True)
    h = b.Node("Add", [h, b1], "fc1")
    h = b.Node("ReLU", [h], "relu1")
    logits = b.Node("MatMul", [h, w2, b2], "fc2", transpose_a=False, transpose_b=True)
    b.Node("SoftmaxCrossEntropy", [logits, "labels"], "loss")
    b.batches = TeacherBatches(steps, 8, lambda g: torch.randn(8, 16, generator=g), 4,
                               torch.int32)
    return b, module


class TinyCnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.max_pool2d(F.relu(self.bn(self.conv(x))), 2)
        return self.fc(torch.flatten(y.mean(dim=(2, 3), keepdim=True), 1))


def BuildCnn(steps=10, optimizer=SGD):
    """x[4,3,8,8] -> Conv2D -> BatchNorm -> ReLU -> MaxPool -> GlobalAvgPool -> Flatten ->
    MatMul -> SoftmaxCrossEntropy; returns (builder, the equivalent nn.Module)."""
    torch.manual_seed(3)
    m = TinyCnn()
    with torch.no_grad():  # Not the identity, so that a wrong argument order shows.
        m.bn.weight.uniform_(0.5, 1.5)
        m.bn.bias.uniform_(-0.2, 0.2)
        m.bn.running_var.fill_(2.0)
    b = ExportBuilder("tiny_cnn", steps, optimizer)
    b.Tensor("x", [4, 3, 8, 8], "input")
    b.Tensor("labels", [4], "label", torch.int64)
    b.Tensor("conv.weight", [8, 3, 3, 3], "parameter", value=m.conv.weight.detach())
    for name in ("weight", "bias"):
        b.Tensor("bn." + name, [8], "parameter", value=getattr(m.bn, name).detach())
    for name in ("running_mean", "running_var"):
        b.Tensor("bn." + name, [8], "buffer", value=getattr(m.bn, name))
    b.Tensor("fc.weight", [5, 8], "parameter", value=m.fc.weight.detach())
    b.Tensor("fc.bias", [5], "parameter", value=m.fc.bias.detach())
    y = b.Node("Conv2D", ["x", "conv.weight"], "conv", stride=[1, 1], padding=[1, 1],
               dilation=[1, 1], groups=1)
    y = b.Node("BatchNorm", [y, "bn.weight", "bn.bias", "bn.running_mean", "bn.running_var"],
               "bn", epsilon=1e-5, momentum=0.1)
    y = b.Node("ReLU", [y], "relu")
    y = b.Node("MaxPool", [y], "pool", kernel_size=[2, 2], stride=[], padding=[0, 0],
               ceil_mode=False)
    y = b.Node("GlobalAvgPool", [y], "gap")
    y = b.Node("Flatten", [y], "flatten", axis=1)
    y = b.Node("MatMul", [y, "fc.weight", "fc.bias"], "fc", transpose_a=False,
               transpose_b=True)
    b.Node("SoftmaxCrossEntropy", [y, "labels"], "loss")
    b.batches = TeacherBatches(steps, 4, lambda g: torch.randn(4, 3, 8, 8, generator=g), 5,
                               torch.int64)
    return b, m


class TinyVision(nn.Module):
    """mobilenet_v3's activations, swin's strided slice and vit's expanded token."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.token = nn.Parameter(torch.randn(1, 8) * 0.3)
        self.fc = nn.Linear(8, 5)

    def forward(self, x):
        y = F.hardswish(self.conv(x))[:, :, 0::2, 1::2]
        y = torch.flatten(y.mean(dim=(2, 3), keepdim=True), 1)
        y = y + self.token.expand(x.shape[0], -1)
        y = y * F.hardsigmoid(y) + F.hardtanh(0.2 * y + 0.4, 0.0, 1.0)
        return self.fc(y)


def BuildVision(steps=10):
    """x[4,3,4,4] -> Conv2D -> HardSwish -> Slice (steps 2) -> GlobalAvgPool -> Flatten ->
    Add(Expand(token)) -> Mul(HardSigmoid) + HardSigmoid(alpha 0.2, beta 0.4) -> MatMul ->
    SoftmaxCrossEntropy; returns (builder, the equivalent nn.Module)."""
    torch.manual_seed(5)
    m = TinyVision()
    b = ExportBuilder("tiny_vision", steps, SGD)
    b.Tensor("x", [4, 3, 4, 4], "input")
    b.Tensor("labels", [4], "label", torch.int64)
    b.Tensor("conv.weight", [8, 3, 3, 3], "parameter", value=m.conv.weight.detach())
    b.Tensor("conv.bias", [8], "parameter", value=m.conv.bias.detach())
    b.Tensor("token", [1, 8], "parameter", value=m.token.detach())
    b.Tensor("fc.weight", [5, 8], "parameter", value=m.fc.weight.detach())
    b.Tensor("fc.bias", [5], "parameter", value=m.fc.bias.detach())
    y = b.Node("Conv2D", ["x", "conv.weight", "conv.bias"], "conv", padding=[1, 1])
    y = b.Node("HardSwish", [y], "hswish")
    y = b.Node("Slice", [y], "slice", axes=[2, -1], starts=[0, 1], ends=[4, 4], steps=[2, 2])
    y = b.Node("Flatten", [b.Node("GlobalAvgPool", [y], "gap")], "flatten")
    y = b.Node("Add", [y, b.Node("Expand", ["token"], "expand", shape=[4, 8])], "add")
    gate = b.Node("HardSigmoid", [y], "gate", alpha=1.0 / 6.0, beta=0.5)
    onnx = b.Node("HardSigmoid", [y], "onnx_gate", alpha=0.2, beta=0.4)
    y = b.Node("Add", [b.Node("Mul", [y, gate], "gated"), onnx], "sum")
    y = b.Node("MatMul", [y, "fc.weight", "fc.bias"], "fc", transpose_b=True)
    b.Node("SoftmaxCrossEntropy", [y, "labels"], "loss")
    b.batches = TeacherBatches(steps, 4, lambda g: torch.randn(4, 3, 4, 4, generator=g), 5,
                               torch.int64)
    return b, m


def BuildTransformerBlock(steps=10):
    """Embedding, LayerNorm, Split, Reshape, Transpose, MatMul (batched, transposed),
    causal Softmax, Concat, GELU, Dropout(0), Mul, Sigmoid, Tanh, ReLU6, AvgPool: every op
    the CNN and MLP do not cover, trained with Adam."""
    g = torch.Generator().manual_seed(4)
    b = ExportBuilder("block", steps, ADAM)
    V, T, D, N = 11, 6, 8, 2

    def P(name, shape, scale=0.3, fill=None):
        value = torch.full(shape, fill) if fill is not None else \
            torch.randn(*shape, generator=g) * scale
        return b.Tensor(name, shape, "parameter", value=value)

    b.Tensor("ids", [N, T], "input", torch.int64)
    b.Tensor("labels", [N, T], "label", torch.int32)
    x = b.Node("Embedding", ["ids", P("wte", [V, D])], "emb")
    x = b.Node("LayerNorm", [x, P("ln.weight", [D], fill=1.0), P("ln.bias", [D], fill=0.0)],
               "ln", epsilon=1e-5)
    qkv = b.Node("MatMul", [x, P("qkv.weight", [D, 3 * D])], "qkv")
    q, k, v = b.Node("Split", [qkv], ["q", "k", "v"], axis=-1, sizes=[D, D, D]), "k", "v"
    scores = b.Node("MatMul", [q, k], "scores", transpose_b=True)  # [N,T,T]
    probs = b.Node("Softmax", [scores], "probs", axis=-1, scale=D ** -0.5, causal=True)
    att = b.Node("MatMul", [probs, v], "att")
    att = b.Node("Reshape", [att], "att.r", shape=[N, T, 2, D // 2])
    att = b.Node("Transpose", [att], "att.t", perm=[0, 2, 1, 3])
    att = b.Node("Transpose", [att], "att.tt", perm=[0, 2, 1, 3])
    att = b.Node("Reshape", [att], "att.rr", shape=[N, T, -1])
    gate = b.Node("Sigmoid", [b.Node("Tanh", [att], "tanh")], "gate")
    x2 = b.Node("Add", [x, b.Node("Mul", [att, gate], "gated")], "res")
    x2 = b.Node("Dropout", [x2], "drop", rate=0.0)
    h = b.Node("GELU", [b.Node("MatMul", [x2, P("ff.weight", [D, 16])], "ff")], "gelu",
               approximate="tanh")
    h = b.Node("ReLU6", [h], "relu6")
    h = b.Node("Concat", [h, x2], "cat", axis=2)  # [N,T,24]
    h = b.Node("Reshape", [h], "img", shape=[N, 1, T, 24])
    h = b.Node("AvgPool", [h], "avg", kernel_size=[1, 3], stride=[1, 3], padding=[0, 1],
               ceil_mode=False, count_include_pad=False)  # [N,1,T,8]
    h = b.Node("Reshape", [h], "seq", shape=[N, T, 8])
    logits = b.Node("MatMul", [h, P("head.weight", [V, 8])], "logits", transpose_b=True)
    b.Node("SoftmaxCrossEntropy", [logits, "labels"], "loss")
    ids = torch.randint(0, V, (N, T), generator=g)
    b.batches = [{"ids": ids, "labels": ((ids + 1) % V).to(torch.int32)}] * steps
    return b


def RunReference(directory, *flags):
    """Returns (exit status, result, printed text) of the script's main path."""
    args = ref.ParseArgs([directory, "--threads", "1", "--warmup", "0"] + list(flags))
    text = io.StringIO()
    status, result = ref.Run(args, out=text)
    return status, result, text.getvalue()


def TrainModule(module, batches, optimizer_spec):
    """Returns the losses of training `module` on `batches` the ordinary nn.Module way."""
    opt = ref.MakeOptimizer(optimizer_spec, list(module.parameters()))
    module.train()
    losses = []
    for batch in batches:
        opt.zero_grad()
        loss = F.cross_entropy(module(batch["x"]), batch["labels"].long())
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


class TorchReferenceTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)
        torch.set_num_threads(1)

    def Dir(self, name):
        path = os.path.join(self.tmp.name, name)
        os.makedirs(path)
        return path

    def AssertFalls(self, losses):
        self.assertEqual(len(losses), 10)
        self.assertLess(sum(losses[-3:]) / 3, 0.8 * sum(losses[:3]) / 3,
                        "losses do not fall: %s" % losses)

    def AssertSameLosses(self, ours, theirs):
        diffs = [abs(a - b) for a, b in zip(ours, theirs)]
        self.assertEqual(len(ours), len(theirs))
        self.assertLess(max(diffs), 1e-6, "interpreter %s\nnn.Module   %s" % (ours, theirs))

    def testMlpLossesFallAndMatchModule(self):
        builder, module = BuildMlp()
        d = builder.Write(self.Dir("mlp"))
        status, result, _ = RunReference(d, "--no-memory")
        self.assertEqual(status, 0)
        self.AssertFalls(result["losses"])
        self.AssertSameLosses(result["losses"], TrainModule(module, builder.batches, SGD))

    def testCnnLossesFallAndMatchModule(self):
        builder, module = BuildCnn()
        d = builder.Write(self.Dir("cnn"))
        status, result, _ = RunReference(d, "--no-memory", "--warmup", "2")
        self.assertEqual(status, 0)
        self.AssertFalls(result["losses"])
        self.AssertSameLosses(result["losses"], TrainModule(module, builder.batches, SGD))

    def testCnnWithAdamMatchesModuleIncludingBuffers(self):
        builder, module = BuildCnn(steps=5, optimizer=ADAM)
        d = builder.Write(self.Dir("cnn_adam"))
        export = ref.Export.Load(d)
        losses, _, model = ref.Train(export, ref.GraphInterpreter(export), warmup_steps=0)
        self.AssertSameLosses(losses, TrainModule(module, builder.batches, ADAM))
        for name, expected in [("bn.running_mean", module.bn.running_mean),
                               ("bn.running_var", module.bn.running_var),
                               ("conv.weight", module.conv.weight.detach())]:
            self.assertTrue(torch.allclose(model.State()[name], expected, atol=1e-6),
                            "%s: %s vs %s" % (name, model.State()[name], expected))

    def testVisionOpsMatchModule(self):
        builder, module = BuildVision()
        d = builder.Write(self.Dir("vision"))
        status, result, _ = RunReference(d, "--no-memory")
        self.assertEqual(status, 0)
        # The mean-pooled features cannot fit both teacher batches, so the losses need not
        # fall; ten steps agreeing with the module say the gradients agree.
        self.AssertSameLosses(result["losses"], TrainModule(module, builder.batches, SGD))

    def testVisionOpsMatchTheirDefinitions(self):
        node = {"name": "n", "op": "X"}
        x = torch.linspace(-4, 4, 17, requires_grad=True)  # Holds -3, 0 and 3.
        onnx = ref.OPS["HardSigmoid"]([x], {"alpha": 0.2, "beta": 0.4}, node)
        self.assertTrue(torch.equal(onnx, torch.clamp(0.2 * x + 0.4, 0, 1)))
        onnx.sum().backward()
        inside = (0.2 * x + 0.4 > 0) & (0.2 * x + 0.4 < 1)  # Strictly: x in (-2, 3).
        self.assertTrue(torch.equal(x.grad, torch.where(inside, 0.2, 0.0)))
        default = ref.OPS["HardSigmoid"]([x], ref.OP_DEFAULTS["HardSigmoid"], node)
        self.assertTrue(torch.equal(default, F.hardsigmoid(x)))
        self.assertTrue(torch.equal(ref.OPS["HardSwish"]([x], {}, node), F.hardswish(x)))

        t = torch.randn(2, 5, 6, 3)
        cut = ref.OPS["Slice"]([t], dict(ref.OP_DEFAULTS["Slice"], axes=[1, -2], starts=[1, 0],
                                         ends=[5, 6], steps=[2, 2]), node)
        self.assertTrue(torch.equal(cut, t[:, 1::2, 0::2, :]))
        cut = ref.OPS["Slice"]([t], dict(ref.OP_DEFAULTS["Slice"], axes=[0], starts=[1],
                                         ends=[2]), node)
        self.assertEqual(list(cut.shape), [1, 5, 6, 3])
        with self.assertRaisesRegex(ref.ExportError, "node 'n' \\(Slice\\)"):
            ref.OPS["Slice"]([t], dict(ref.OP_DEFAULTS["Slice"], axes=[0, 1], starts=[1],
                                       ends=[2]), node)
        token = torch.randn(1, 1, 4)
        big = ref.OPS["Expand"]([token], {"shape": [3, 2, 4]}, node)
        self.assertTrue(torch.equal(big, token.expand(3, 2, 4)))

    def testOnnxActivationsMatchTheirDefinitions(self):
        node = {"name": "n", "op": "X"}
        x = torch.linspace(-4, 4, 17, dtype=torch.float64)  # Holds 0.

        def Run(op, **attrs):
            return ref.OPS[op]([x], dict(ref.OP_DEFAULTS[op], **attrs), node)

        self.assertTrue(torch.equal(Run("LeakyReLU"), torch.where(x > 0, x, 0.01 * x)))
        self.assertTrue(torch.equal(Run("LeakyReLU", alpha=0.2), torch.where(x > 0, x, 0.2 * x)))
        self.assertTrue(torch.allclose(Run("ELU", alpha=0.5),
                                       torch.where(x > 0, x, 0.5 * torch.expm1(x))))
        selu = ref.SELU_GAMMA * torch.where(x > 0, x, ref.SELU_ALPHA * torch.expm1(x))
        self.assertTrue(torch.allclose(Run("SELU"), selu))
        # ONNX's float32 defaults count as PyTorch's; other values scale an elu.
        self.assertTrue(torch.equal(Run("SELU", alpha=1.67326319217681884765625,
                                        gamma=1.05070102214813232421875), F.selu(x)))
        self.assertTrue(torch.allclose(Run("SELU", alpha=1.0, gamma=2.0),
                                       2 * torch.where(x > 0, x, torch.expm1(x))))
        self.assertTrue(torch.allclose(Run("Softplus"), torch.log1p(torch.exp(x))))
        big = torch.tensor([20.5, 100.0])
        self.assertTrue(torch.equal(ref.OPS["Softplus"]([big], {}, node), big))
        self.assertTrue(torch.allclose(Run("Erf"), torch.erf(x)))
        self.assertTrue(torch.allclose(Run("Mish"), x * torch.tanh(torch.log1p(torch.exp(x)))))
        self.assertTrue(torch.equal(ref.OPS["Sqrt"]([x.abs()], {}, node), x.abs().sqrt()))

    def testSubAndDivBroadcast(self):
        node = {"name": "n", "op": "X"}
        a = torch.arange(6, dtype=torch.float64).reshape(2, 3)
        b = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
        self.assertEqual(ref.NUM_INPUTS["Sub"], (2, 2))
        self.assertEqual(ref.NUM_INPUTS["Div"], (2, 2))
        self.assertTrue(torch.equal(ref.OPS["Sub"]([a, b], {}, node),
                                    torch.tensor([[-1.0, -1.0, -2.0], [2.0, 2.0, 1.0]],
                                                 dtype=torch.float64)))
        self.assertTrue(torch.equal(ref.OPS["Div"]([a, b], {}, node),
                                    torch.tensor([[0.0, 0.5, 0.5], [3.0, 2.0, 1.25]],
                                                 dtype=torch.float64)))

    def testPowTakesItsExponent(self):
        x = torch.tensor([0.5, 2.0, 3.0], dtype=torch.float64)
        node = {"name": "n", "op": "Pow"}
        self.assertTrue(torch.equal(ref.OPS["Pow"]([x], {"exponent": 3.0}, node), x * x * x))
        self.assertEqual(ref.OP_DEFAULTS["Pow"], {"exponent": 1.0})

    def testPReluIsPyTorchsPerChannelAndScalar(self):
        node = {"name": "n", "op": "PReLU"}
        x = torch.linspace(-2, 2, 24, dtype=torch.float64).reshape(2, 3, 2, 2)
        w = torch.tensor([0.1, 0.2, 0.3], dtype=torch.float64)
        self.assertEqual(ref.NUM_INPUTS["PReLU"], (2, 2))
        self.assertTrue(torch.equal(ref.OPS["PReLU"]([x, w.reshape(3, 1, 1)], {}, node),
                                    F.prelu(x, w)))
        self.assertTrue(torch.equal(ref.OPS["PReLU"]([x, w[:1]], {}, node),
                                    torch.where(x > 0, x, 0.1 * x)))

    def testNegativeStepSlicesWalkBackwards(self):
        node = {"name": "n", "op": "Slice"}
        x = torch.arange(30, dtype=torch.float64).reshape(2, 3, 5)
        # x[:, ::-1, 4:0:-2] in numpy's terms: end -1 runs through element 0.
        y = ref.OPS["Slice"]([x], {"axes": [1, 2], "starts": [2, 4], "ends": [-1, 0],
                                   "steps": [-1, -2]}, node)
        want = torch.from_numpy(x.numpy()[:, ::-1, 4:0:-2].copy())
        self.assertTrue(torch.equal(y, want))

    def testReductionsAreSumAmaxAndAmin(self):
        x = torch.randn(2, 3, 4, dtype=torch.float64)
        for op, fn in (("ReduceSum", torch.sum), ("ReduceMax", torch.amax),
                       ("ReduceMin", torch.amin)):
            node = {"name": "n", "op": op}
            y = ref.OPS[op]([x], {"axes": [0, -1], "keepdims": False}, node)
            self.assertTrue(torch.equal(y, fn(x, dim=(0, 2))))
            every = ref.OPS[op]([x], dict(ref.OP_DEFAULTS[op]), node)
            self.assertEqual(list(every.shape), [1, 1, 1])
            self.assertTrue(torch.equal(every.reshape(()), fn(x)))

    def testMatMulBroadcastsBatchDimsAsNumpy(self):
        node = {"name": "n", "op": "MatMul"}
        a = torch.randn(2, 1, 3, 4, dtype=torch.float64)
        b = torch.randn(5, 4, 6, dtype=torch.float64)
        y = ref.OPS["MatMul"]([a, b], dict(ref.OP_DEFAULTS["MatMul"]), node)
        self.assertEqual(list(y.shape), [2, 5, 3, 6])
        self.assertTrue(torch.allclose(y[1, 3], a[1, 0] @ b[3]))
    def testConvTransposeIsNnConvTranspose2dAndCropsAsymmetricPadding(self):
        node = {"name": "n", "op": "ConvTranspose2D"}
        m = torch.nn.ConvTranspose2d(4, 6, 3, stride=2, padding=1, output_padding=1, groups=2)
        x = torch.randn(2, 4, 5, 5)
        attrs = dict(ref.OP_DEFAULTS["ConvTranspose2D"], stride=[2, 2], padding=[1, 1],
                     output_padding=[1, 1], groups=2)
        y = ref.OPS["ConvTranspose2D"]([x, m.weight, m.bias], attrs, node)
        self.assertTrue(torch.equal(y, m(x)))
        # Padding (top 1, left 0, bottom 2, right 1) with output padding 1 is the unpadded
        # [11, 11] output cropped: rows 1 to 9, all 11 columns.
        attrs = dict(attrs, padding=[1, 0, 2, 1], groups=1)
        w = torch.randn(4, 3, 3, 3)
        y = ref.OPS["ConvTranspose2D"]([x, w], attrs, node)
        full = F.conv_transpose2d(x, w, stride=2)
        self.assertEqual(list(y.shape), [2, 3, 9, 11])
        self.assertTrue(torch.equal(y[:, :, :, :10], full[:, :, 1:10, 0:10]))
        self.assertTrue(torch.equal(y[:, :, :, 10], full[:, :, 1:10, 10]))

    def testResizeIsInterpolateWithItsScales(self):
        node = {"name": "n", "op": "Resize"}
        x = torch.randn(2, 3, 5, 7)
        attrs = dict(ref.OP_DEFAULTS["Resize"], size=[13, 17], mode="bilinear",
                     align_corners=True)
        self.assertTrue(torch.equal(ref.OPS["Resize"]([x], attrs, node),
                                    F.interpolate(x, size=(13, 17), mode="bilinear",
                                                  align_corners=True)))
        attrs = dict(ref.OP_DEFAULTS["Resize"], size=[8, 11], scale_h=1.7, scale_w=1.7)
        self.assertTrue(torch.equal(ref.OPS["Resize"]([x], attrs, node),
                                    F.interpolate(x, scale_factor=1.7, mode="nearest")))
    def testGroupNormIsItsDefinition(self):
        node = {"name": "n", "op": "GroupNorm"}
        x = torch.linspace(-2, 3, 2 * 4 * 3 * 3, dtype=torch.float64).reshape(2, 4, 3, 3) ** 2
        w = torch.tensor([0.5, 1.0, 1.5, 2.0], dtype=torch.float64)
        b = torch.tensor([0.0, 0.1, -0.2, 0.3], dtype=torch.float64)
        y = ref.OPS["GroupNorm"]([x, w, b], {"num_groups": 2, "epsilon": 1e-5}, node)
        g = x.reshape(2, 2, -1)
        want = ((g - g.mean(-1, keepdim=True)) /
                torch.sqrt(g.var(-1, unbiased=False, keepdim=True) + 1e-5)).reshape(x.shape)
        want = want * w.reshape(4, 1, 1) + b.reshape(4, 1, 1)
        self.assertTrue(torch.allclose(y, want, rtol=1e-12, atol=1e-12))
        self.assertIn("num_groups", ref.REQUIRED_ATTRS["GroupNorm"])

    def testPixelSoftmaxCrossEntropyAveragesOverCountedPixels(self):
        node = {"name": "n", "op": "PixelSoftmaxCrossEntropy"}
        logits = torch.linspace(-2, 2, 2 * 3 * 2, dtype=torch.float64).reshape(2, 3, 2)
        labels = torch.tensor([[0, 255], [2, 1]])
        loss = ref.OPS["PixelSoftmaxCrossEntropy"]([logits, labels], {"ignore_index": 255}, node)
        logp = torch.log_softmax(logits, dim=1)
        want = -(logp[0, 0, 0] + logp[1, 2, 0] + logp[1, 1, 1]) / 3
        self.assertTrue(torch.allclose(loss, want, rtol=1e-12, atol=0))

    def testOtherOpsTrain(self):
        d = BuildTransformerBlock().Write(self.Dir("block"))
        status, result, _ = RunReference(d, "--no-memory")
        self.assertEqual(status, 0)
        self.AssertFalls(result["losses"])

    def testOpsMatchTheirDefinitions(self):
        x = torch.randn(2, 3, 4, 4)
        node = {"name": "n", "op": "X"}
        scores = torch.randn(2, 5, 5)
        probs = ref.OPS["Softmax"]([scores], {"axis": -1, "scale": 0.5, "causal": True}, node)
        self.assertTrue(torch.allclose(probs.sum(-1), torch.ones(2, 5)))
        self.assertEqual(probs.triu(1).abs().sum().item(), 0.0)
        self.assertTrue(torch.allclose(probs[:, 1, :2], F.softmax(0.5 * scores[:, 1, :2], -1)))
        conv = ref.OPS["Conv2D"]([x, torch.randn(6, 3, 3, 3)],
                                 dict(ref.OP_DEFAULTS["Conv2D"], padding=[1, 0, 2, 1]), node)
        self.assertEqual(list(conv.shape), [2, 6, 5, 3])  # H: 4+1+2-2, W: 4+0+1-2
        pool = ref.OPS["MaxPool"]([x], dict(ref.OP_DEFAULTS["MaxPool"], kernel_size=[3, 3],
                                            stride=[2, 2], padding=[1, 1], ceil_mode=True),
                                  dict(node, op="MaxPool"))
        self.assertTrue(torch.equal(pool, F.max_pool2d(x, 3, 2, 1, ceil_mode=True)))
        flat = ref.OPS["Flatten"]([x], {"axis": -1}, node)
        self.assertEqual(list(flat.shape), [24, 4])

    def testMemoryAccountsForPersistentTensors(self):
        builder, _ = BuildMlp(steps=3)
        d = builder.Write(self.Dir("mlp_memory"))
        status, result, text = RunReference(d)
        self.assertEqual(status, 0)
        memory = result["memory"]
        param_bytes = 4 * (32 * 16 + 32 + 4 * 32 + 4)
        # SGD with momentum: parameters, gradients, momentum buffers; no batch-norm buffers.
        self.assertEqual(memory["persistent_check"], "ok", text)
        self.assertEqual(result["persistent_bytes"], 3 * param_bytes)
        self.assertEqual(result["peak_bytes"],
                         result["persistent_bytes"] + result["peak_step_bytes"])
        batch_bytes = 8 * 16 * 4 + 8 * 4
        self.assertGreater(result["peak_step_bytes"], batch_bytes)  # Plus activations.
        self.assertIn("persistent", text)

    def testComparisonPassesOnEqualLossesAndFailsOnPerturbed(self):
        builder, _ = BuildMlp(steps=4)
        d = builder.Write(self.Dir("compare"))
        _, result, _ = RunReference(d, "--no-memory")
        export = ref.Export.Load(d)
        _, _, model = ref.Train(export, ref.GraphInterpreter(export), 0)
        WriteHeadroomResults(d, result["losses"], model.State())
        json_path = os.path.join(self.tmp.name, "out.json")
        status, _, text = RunReference(d, "--no-memory", "--json", json_path)
        self.assertEqual(status, 0, text)
        with open(json_path) as f:
            comparison = json.load(f)["comparison"]
        self.assertTrue(comparison["ok"])
        self.assertEqual(comparison["max_loss_abs_diff"], 0.0)
        self.assertEqual(comparison["final_parameter_max_rel_diff"], 0.0)

        perturbed = list(result["losses"])
        perturbed[2] *= 1.01  # 1% off: outside 1e-3 relative + 1e-4 absolute.
        WriteHeadroomResults(d, perturbed, model.State())
        proc = subprocess.run(["/usr/bin/python3", SCRIPT, d, "--threads", "1", "--no-memory"],
                              capture_output=True, text=True)
        self.assertEqual(proc.returncode, 1, proc.stdout + proc.stderr)
        self.assertIn("MISMATCH: step 2", proc.stdout)

        WriteHeadroomResults(d, result["losses"][:3] + [None], model.State())  # A NaN loss.
        status, _, text = RunReference(d, "--no-memory")
        self.assertEqual(status, 1, text)
        self.assertIn("MISMATCH: step 3: headroom loss nan", text)

    def testUnknownOpIsNamed(self):
        builder, _ = BuildMlp(steps=1)
        builder.graph["nodes"][2]["op"] = "Swish"
        d = builder.Write(self.Dir("unknown"))
        stderr = io.StringIO()
        with contextlib.redirect_stderr(stderr):
            status = ref.main([d, "--threads", "1"])
        self.assertEqual(status, 2)
        self.assertIn("node 'relu1' (Swish): unknown op 'Swish'", stderr.getvalue())

    def testMissingBatchIsNamed(self):
        builder, _ = BuildMlp(steps=2)
        d = builder.Write(self.Dir("missing"))
        with open(os.path.join(d, "graph.json")) as f:
            graph = json.load(f)
        graph["batches"] = [e for e in graph["batches"]
                            if not (e["step"] == 1 and e["name"] == "labels")]
        with open(os.path.join(d, "graph.json"), "w") as f:
            json.dump(graph, f)
        with self.assertRaisesRegex(ref.ExportError, "step 1 has no batch for 'labels'"):
            ref.Export.Load(d)


if __name__ == "__main__":
    unittest.main()
