"""Tests of headroom_client.torch_graph: PyTorch modules converted to GraphDefs, each checked
against the module (parameter counts, ops) and validated by the real `headroom graph` CLI,
which also checks every traced shape against Headroom's own shape inference.

    torch_graph_test.py --headroom PATH_TO_HEADROOM_CLI [unittest args]
"""

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.nn.functional as F
import torchvision
from torch import nn

from headroom_client import pb, read_graph, write_graph
from headroom_client.torch_graph import UnsupportedOpsError, graph_from_module

HEADROOM_CLI = None  # Set from --headroom in __main__.


def run_cli(*args):
    """Returns the JSON object `headroom ARGS --json` prints; fails the test on an error."""
    result = subprocess.run([HEADROOM_CLI, *args, "--json"], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"headroom {' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stderr}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def leaves(graph, role):
    return {t.name: list(t.shape) for t in graph.tensors if t.role == role}


def ops(graph):
    return dict(collections.Counter(n.op for n in graph.nodes))


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Mlp(nn.Module):
    """Flatten, a nested Sequential of Linear/ReLU/Dropout, a residual Linear."""

    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(
            nn.Linear(784, 256), nn.ReLU(), nn.Dropout(0.1),
            nn.Sequential(nn.Linear(256, 128), nn.ReLU(inplace=True)))
        self.skip = nn.Linear(128, 128)
        self.head = nn.Linear(128, 10)

    def forward(self, x):
        h = self.body(torch.flatten(x, 1))
        h = F.relu(h + self.skip(h))
        return self.head(h)


class Mixed(nn.Module):
    """The less common conversions: 'same' padding, view via size(), cat, adaptive pooling
    to 2x2, avg pooling, GELU, LayerNorm, a product, a transpose, Identity, F.dropout."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 4, padding="same", bias=True)
        self.branch = nn.Conv2d(3, 8, 3, stride=1, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(16)
        self.pool = nn.AvgPool2d(2, ceil_mode=True)
        self.adaptive = nn.AdaptiveAvgPool2d((2, 2))
        self.norm = nn.LayerNorm(16)
        self.act = nn.GELU(approximate="tanh")
        self.keep = nn.Identity()
        self.gate = nn.Linear(16, 16)
        self.fc = nn.Linear(64, 5)

    def forward(self, x):
        y = torch.cat([self.conv(x), F.relu(self.branch(x))], dim=1)
        y = self.adaptive(self.pool(self.bn(y)))          # 7x7 -> 4x4 (ceil) -> 2x2
        y = y.permute(0, 2, 3, 1)                         # [N,2,2,16]
        y = self.act(self.norm(y)) * torch.sigmoid(self.gate(y))
        y = self.keep(y.transpose(1, 2)).contiguous()
        y = F.dropout(y.view(y.size(0), -1), 0.2, self.training)
        return self.fc(y)


class Tagger(nn.Module):
    """Token ids in, per-token logits out: Embedding, Tanh, Softmax over classes."""

    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 32)
        self.proj = nn.Linear(32, 7)

    def forward(self, ids):
        return torch.softmax(self.proj(torch.tanh(self.embed(ids))), dim=-1)


class Recurrent(nn.Module):
    """Uses ops Headroom lacks: an LSTM and torch.sin twice."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 16, batch_first=True)
        self.fc = nn.Linear(16, 4)

    def forward(self, x):
        # Indexing, not `out, _ = ...`: torch 1.13's fx cannot unpack on Python 3.11.
        out = self.lstm(torch.sin(x))[0]
        return self.fc(torch.sin(out[:, -1]))


class Elementwise(nn.Module):
    """Calls `fn` on its input: torch.sqrt and friends as a module of a Sequential."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x):
        return self.fn(x)


class TorchGraphTest(unittest.TestCase):

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def check_with_cli(self, module, graph, file_name):
        """Writes `graph`, validates it with `headroom graph`, and checks the CLI counts the
        module's parameters and the graph's ops. Returns the CLI's summary."""
        path = os.path.join(self.tmp.name, file_name)
        write_graph(graph, path)
        self.assertEqual(read_graph(path), graph)
        summary = run_cli("graph", "--graph", path)
        self.assertEqual(summary["num_parameters"], sum(p.numel() for p in module.parameters()))
        self.assertEqual(summary["nodes_by_op"], ops(graph))
        return summary

    def test_resnet18_matches_the_module_and_the_zoo(self):
        torch.manual_seed(0)
        model = torchvision.models.resnet18(weights=None)
        graph = graph_from_module(model, torch.randn(4, 3, 64, 64), name="resnet18",
                                  classes=1000)

        params = leaves(graph, pb.ROLE_PARAMETER)
        self.assertEqual(set(params), {n for n, _ in model.named_parameters()})
        self.assertEqual(sum(numel(s) for s in params.values()),
                         sum(p.numel() for p in model.parameters()))
        for name, p in model.named_parameters():
            self.assertEqual(params[name], list(p.shape), name)
        buffers = leaves(graph, pb.ROLE_BUFFER)
        self.assertEqual(len(buffers), 40)  # running_mean and running_var of 20 BatchNorms.
        self.assertEqual(leaves(graph, pb.ROLE_INPUT), {"x": [4, 3, 64, 64]})
        self.assertEqual(leaves(graph, pb.ROLE_LABEL), {"labels": [4]})
        self.assertEqual(ops(graph), {"Conv2D": 20, "BatchNorm": 20, "ReLU": 17, "Add": 8,
                                      "MaxPool": 1, "GlobalAvgPool": 1, "Flatten": 1,
                                      "MatMul": 1, "SoftmaxCrossEntropy": 1})
        names = [n.name for n in graph.nodes]
        self.assertIn("layer1.0.add", names)  # Named by the block whose forward adds.
        self.assertEqual(graph.loss, "loss")

        summary = self.check_with_cli(model, graph, "resnet18.pb")
        # The zoo builds resnet18 as torchvision does: the same graph but for names.
        zoo = run_cli("graph", "--model", "resnet18", "--batch", "4", "--image_size", "64")
        for key in ("num_nodes", "num_tensors", "parameter_bytes", "buffer_bytes",
                    "input_bytes", "activation_bytes", "nodes_by_op"):
            self.assertEqual(summary[key], zoo[key], key)

    def test_mlp(self):
        model = Mlp()
        graph = graph_from_module(model, torch.randn(32, 1, 28, 28), name="mlp")
        self.assertEqual(ops(graph), {"Flatten": 1, "MatMul": 4, "ReLU": 3, "Dropout": 1,
                                      "Add": 1, "SoftmaxCrossEntropy": 1})
        self.assertEqual(sum(numel(s) for s in leaves(graph, pb.ROLE_PARAMETER).values()),
                         sum(p.numel() for p in model.parameters()))
        self.assertEqual(leaves(graph, pb.ROLE_BUFFER), {})
        dropout = next(n for n in graph.nodes if n.op == "Dropout")
        self.assertAlmostEqual(dropout.attrs["rate"].f, 0.1)
        self.assertEqual(dropout.name, "body.2")
        self.check_with_cli(model, graph, "mlp.pbtxt")

    def test_less_common_ops_agree_with_headroom_shapes(self):
        model = Mixed()
        graph = graph_from_module(model, torch.randn(2, 3, 7, 7))
        self.assertEqual(ops(graph), {
            "Conv2D": 2, "ReLU": 1, "Concat": 1, "BatchNorm": 1, "AvgPool": 2,
            "Transpose": 2, "LayerNorm": 1, "GELU": 1, "MatMul": 2, "Sigmoid": 1, "Mul": 1,
            "Reshape": 1, "Dropout": 1, "SoftmaxCrossEntropy": 1})
        conv = next(n for n in graph.nodes if n.name == "conv")
        self.assertEqual(list(conv.attrs["padding"].ints.values), [1, 1, 2, 2])
        self.check_with_cli(model, graph, "mixed.pbtxt")

    def test_mobilenet_v3_hard_activations(self):
        # nn.Hardswish in the blocks and the classifier, nn.Hardsigmoid in every
        # squeeze-excitation gate; Headroom's shapes must agree with the traced ones.
        model = torchvision.models.mobilenet_v3_small(weights=None)
        graph = graph_from_module(model, torch.randn(2, 3, 64, 64), name="mobilenet_v3_small")
        counts = ops(graph)
        self.assertEqual((counts["HardSwish"], counts["HardSigmoid"]), (19, 9))
        self.check_with_cli(model, graph, "mobilenet_v3_small.pb")

    def test_onnx_activations(self):
        model = nn.Sequential(nn.Linear(6, 8), nn.LeakyReLU(0.2), nn.ELU(0.5), nn.SELU(),
                              nn.Softplus(), nn.Mish(), Elementwise(torch.sqrt),
                              Elementwise(torch.erf), Elementwise(F.leaky_relu),
                              nn.Linear(8, 4))
        graph = graph_from_module(model, torch.randn(3, 6))
        self.assertEqual(ops(graph), {
            "MatMul": 2, "LeakyReLU": 2, "ELU": 1, "SELU": 1, "Softplus": 1, "Mish": 1,
            "Sqrt": 1, "Erf": 1, "SoftmaxCrossEntropy": 1})
        alphas = [n.attrs["alpha"].f for n in graph.nodes if n.op in ("LeakyReLU", "ELU")]
        self.assertEqual([round(a, 6) for a in alphas], [0.2, 0.5, 0.01])
        self.check_with_cli(model, graph, "activations.pbtxt")
        with self.assertRaises(UnsupportedOpsError) as caught:
            graph_from_module(nn.Sequential(nn.Softplus(beta=2)), torch.randn(3, 6))
        self.assertIn("beta != 1", str(caught.exception))

    def test_arithmetic_and_prelu(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3, padding=1)
                self.act = nn.PReLU(4)
                self.shared = nn.PReLU()
                self.fc = nn.Linear(4, 5)

            def forward(self, x):
                y = self.shared(self.act(self.conv(x)))
                z = (y - torch.tanh(y)) / torch.sigmoid(y)
                h = self.fc(torch.flatten(F.adaptive_avg_pool2d(z, 1), 1))
                return torch.pow(h, 2) - h ** 3

        model = Net()
        graph = graph_from_module(model, torch.randn(2, 3, 6, 6))
        counts = ops(graph)
        self.assertEqual((counts["PReLU"], counts["Sub"], counts["Div"], counts["Pow"]),
                         (2, 2, 1, 2))
        exponents = sorted(n.attrs["exponent"].f for n in graph.nodes if n.op == "Pow")
        self.assertEqual(exponents, [2.0, 3.0])
        slopes = [n for n in graph.nodes if n.op == "Reshape" and n.inputs[0] == "act.weight"]
        self.assertEqual(len(slopes), 1)
        self.check_with_cli(model, graph, "arithmetic.pbtxt")

    def test_reductions_flip_and_broadcast_matmul(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 4, 3, padding=1)
                self.one = nn.Conv2d(4, 1, 1)
                self.mix = nn.Parameter(torch.randn(3, 6, 5))
                self.column = nn.Parameter(torch.randn(5))
                self.row = nn.Parameter(torch.randn(3))
                self.fc = nn.Linear(14, 5)

            def forward(self, x):
                y = torch.flip(torch.relu(self.conv(x)), [3])       # [N, 4, 6, 6]
                peak = torch.amax(y, dim=(2, 3))                     # [N, 4]
                floor = torch.sum(y.amin(dim=-1), 2)                 # [N, 4]
                m = torch.matmul(self.one(y), self.mix)              # [N,1,6,6] x [3,6,5]
                s = self.row @ (m @ self.column)                     # [N, 6]
                return self.fc(torch.cat([peak, floor, s.sum(1, keepdim=True) * s], 1))

        model = Net()
        graph = graph_from_module(model, torch.randn(2, 3, 6, 6))
        counts = ops(graph)
        self.assertEqual((counts["ReduceMax"], counts["ReduceMin"], counts["ReduceSum"]),
                         (1, 1, 2))
        flip = [n for n in graph.nodes if n.op == "Slice" and list(n.attrs["steps"].ints.values)]
        self.assertEqual([list(n.attrs["steps"].ints.values) for n in flip], [[-1]])
        self.assertEqual(list(flip[0].attrs["starts"].ints.values), [5])
        self.assertEqual(list(flip[0].attrs["ends"].ints.values), [-1])
        # Three products (and the Linear); the vectors become a column and a row.
        self.assertEqual(counts["MatMul"], 4)
        reshapes = sorted(n.name for n in graph.nodes if n.op == "Reshape"
                          and (n.name.endswith(".row") or n.name.endswith(".column")))
        self.assertEqual(len(reshapes), 2)
        self.check_with_cli(model, graph, "reductions.pbtxt")
    def test_upsampling_segmentation_head(self):
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
                self.up = nn.ConvTranspose2d(8, 6, 3, stride=2, padding=1, output_padding=1,
                                             groups=2)
                self.upsample = nn.Upsample(scale_factor=2)
                self.fc = nn.Linear(6, 5)

            def forward(self, x):
                input_shape = x.shape[-2:]
                y = self.upsample(torch.relu(self.up(torch.relu(self.conv(x)))))
                y = F.interpolate(y, scale_factor=0.5, mode="bilinear", align_corners=True)
                # torchvision's segmentation heads: back to the input's size through x.shape.
                y = F.interpolate(y, size=input_shape, mode="bilinear", align_corners=False)
                return self.fc(torch.flatten(F.adaptive_avg_pool2d(y, 1), 1))

        model = Net()
        graph = graph_from_module(model, torch.randn(2, 3, 10, 10))
        counts = ops(graph)
        self.assertEqual((counts["ConvTranspose2D"], counts["Resize"]), (1, 3))
        up = next(n for n in graph.nodes if n.op == "ConvTranspose2D")
        self.assertEqual(list(up.attrs["output_padding"].ints.values), [1, 1])
        self.assertEqual(up.attrs["groups"].i, 2)
        self.assertEqual(leaves(graph, pb.ROLE_PARAMETER)["up.weight"], [8, 3, 3, 3])
        resizes = [n for n in graph.nodes if n.op == "Resize"]
        self.assertEqual([list(n.attrs["size"].ints.values) for n in resizes],
                         [[20, 20], [10, 10], [10, 10]])
        self.assertEqual([n.attrs["mode"].s for n in resizes], ["nearest", "bilinear", "bilinear"])
        # A size (here through x.shape) sets no scale: the coordinates use in / out.
        self.assertEqual([n.attrs["scale_h"].f if "scale_h" in n.attrs else None
                          for n in resizes], [2.0, 0.5, None])
        self.assertEqual([n.attrs["align_corners"].b for n in resizes[1:]], [True, False])
        self.check_with_cli(model, graph, "upsampling.pbtxt")
        with self.assertRaises(UnsupportedOpsError) as caught:
            graph_from_module(nn.Sequential(nn.Upsample(scale_factor=2, mode="bicubic")),
                              torch.randn(1, 2, 4, 4))
        self.assertIn("nn.Upsample(mode='bicubic')", str(caught.exception))
    def test_group_and_instance_norm(self):
        model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.GroupNorm(4, 8), nn.ReLU(),
                              nn.InstanceNorm2d(8, affine=True, eps=1e-3), nn.Flatten(),
                              nn.Linear(8 * 36, 5))
        graph = graph_from_module(model, torch.randn(2, 3, 6, 6))
        norms = [n for n in graph.nodes if n.op == "GroupNorm"]
        self.assertEqual([n.attrs["num_groups"].i for n in norms], [4, 8])
        self.assertAlmostEqual(norms[1].attrs["epsilon"].f, 1e-3)
        self.check_with_cli(model, graph, "norms.pbtxt")
        with self.assertRaises(UnsupportedOpsError) as caught:
            graph_from_module(nn.Sequential(nn.InstanceNorm2d(3)), torch.randn(2, 3, 4, 4))
        self.assertIn("affine=False", str(caught.exception))

    def test_integer_inputs_and_per_token_logits(self):
        model = Tagger()
        graph = graph_from_module(model, torch.randint(0, 100, (4, 12)), classes=7)
        inputs = [t for t in graph.tensors if t.role == pb.ROLE_INPUT]
        self.assertEqual([(t.name, t.dtype) for t in inputs], [("ids", pb.DTYPE_INT64)])
        self.assertEqual(leaves(graph, pb.ROLE_LABEL), {"labels": [4, 12]})
        self.check_with_cli(model, graph, "tagger.pb")

    def test_unsupported_ops_are_all_listed(self):
        with self.assertRaises(UnsupportedOpsError) as caught:
            graph_from_module(Recurrent(), torch.randn(2, 5, 8))
        print(caught.exception)
        self.assertEqual(caught.exception.unsupported, {"nn.LSTM": 1, "torch.sin": 2})
        self.assertIn("3 unsupported ops (nn.LSTM x1, torch.sin x2)", str(caught.exception))

    def test_conversion_leaves_the_module_as_it_was(self):
        model = Mlp()
        bn_model = torchvision.models.resnet18(weights=None)
        before = bn_model.bn1.running_mean.clone()
        model.train()
        bn_model.eval()
        graph_from_module(model, torch.randn(2, 1, 28, 28))
        graph_from_module(bn_model, torch.randn(2, 3, 32, 32))
        self.assertTrue(all(m.training for m in model.modules()))
        self.assertFalse(any(m.training for m in bn_model.modules()))
        self.assertTrue(torch.equal(bn_model.bn1.running_mean, before))

    def test_bad_requests(self):
        with self.assertRaisesRegex(ValueError, "has 10 classes"):
            graph_from_module(Mlp(), torch.randn(2, 1, 28, 28), classes=1000)
        with self.assertRaisesRegex(ValueError, "loss 'mse' is not supported"):
            graph_from_module(Mlp(), torch.randn(2, 1, 28, 28), loss="mse")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(add_help=False)
    parser.add_argument("--headroom", required=True, help="the headroom CLI binary")
    flags, rest = parser.parse_known_args()
    HEADROOM_CLI = os.path.abspath(flags.headroom)
    unittest.main(argv=[sys.argv[0], *rest])
