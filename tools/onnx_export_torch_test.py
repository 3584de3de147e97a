#!/usr/bin/python3
"""`headroom export` against PyTorch: a zoo CNN with batch norms trained by `headroom train`,
exported with `headroom export --checkpoint`, run by PyTorch (tools/onnx_torch.py, batch norm
in inference mode), and its logits against Headroom's inference logits of the trained model
(tools/inference_logits) within 1e-5 relative; the export also runs at another batch (its
batch is symbolic) and imports back through `inference_logits --onnx` with the same logits.

    /usr/bin/python3 tools/onnx_export_torch_test.py HEADROOM INFERENCE_LOGITS
(bazel test //tools:onnx_export_torch_test passes the built binaries).
"""

import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_torch  # noqa: E402

HEADROOM = ""
LOGITS = ""
EXAMPLES = ""  # The folder of examples/tiny_*.pbtxt.
TOLERANCE = 1e-5


def run(*args):
    result = subprocess.run([str(a) for a in args], capture_output=True, text=True)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))} exited {result.returncode}:\n"
                             f"{result.stdout}\n{result.stderr}")
    return result.stdout


def relative(ours, theirs):
    return float(np.abs(ours - theirs).max() / np.abs(theirs).max())


class ExportAgainstTorchTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.onnx_pb2 = onnx_torch.load_onnx_module(cls.tmp.name)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def check_model(self, model, batch, image_size, channels, options=()):
        d = os.path.join(self.tmp.name, model)
        os.makedirs(d)
        zoo = ["--model", model, "--batch", str(batch), *options]
        # 1. Train a few steps (the batch norms' running statistics move), then export.
        run(HEADROOM, "train", *zoo, "--steps", "3", "--export", os.path.join(d, "run"))
        path = os.path.join(d, "model.onnx")
        out = run(HEADROOM, "export", *zoo, "--checkpoint", os.path.join(d, "run"), "--out", path)
        self.assertIn("inference form", out)

        m = self.onnx_pb2.ModelProto()
        with open(path, "rb") as f:
            m.ParseFromString(f.read())
        ops = [n.op_type for n in m.graph.node]
        self.assertIn("BatchNormalization", ops)
        self.assertNotIn("Dropout", ops)
        for n in m.graph.node:
            if n.op_type == "BatchNormalization":
                modes = [a.i for a in n.attribute if a.name == "training_mode"]
                self.assertEqual(modes, [0], n.name)
        self.assertEqual(m.graph.input[0].type.tensor_type.shape.dim[0].dim_param, "batch")
        self.assertEqual(len(m.graph.output), 1)

        # 2. Held-out inputs: PyTorch's logits from the file, Headroom's from the trained
        #    model and from the file imported back.
        rng = np.random.default_rng(5)
        x = rng.standard_normal((batch, channels, image_size, image_size)).astype(np.float32)
        inputs = os.path.join(d, "inputs.bin")
        x.tofile(inputs)
        with torch.no_grad():
            torch_logits = onnx_torch.run(m, {m.graph.input[0].name: torch.from_numpy(x)})[0]
            torch_logits = torch_logits.numpy()
            # The symbolic batch: the first rows alone give the same logits.
            part = onnx_torch.run(m, {m.graph.input[0].name: torch.from_numpy(x[:batch - 1])})[0]
        trained_bin = os.path.join(d, "trained.bin")
        size_args = ["--image-size", str(image_size)] if "--image_size" in options else []
        run(LOGITS, "--model", model, "--batch", batch, *size_args, "--checkpoint",
            os.path.join(d, "run"), "--inputs", inputs, "--out", trained_bin)
        trained = np.fromfile(trained_bin, dtype=np.float32).reshape(torch_logits.shape)
        back_bin = os.path.join(d, "back.bin")
        run(LOGITS, "--onnx", path, "--batch", batch, "--inputs", inputs, "--out", back_bin)
        back = np.fromfile(back_bin, dtype=np.float32).reshape(torch_logits.shape)

        error = relative(trained, torch_logits)
        print(f"{model}: {len(ops)} ONNX nodes; Headroom's trained model against PyTorch on the "
              f"export: relative error {error:.2e}; imported back: "
              f"{relative(back, trained):.2e}; batch {batch - 1} against {batch}: "
              f"{relative(part.numpy(), torch_logits[:batch - 1]):.2e}")
        self.assertLessEqual(error, TOLERANCE)
        np.testing.assert_array_equal(back, trained)
        self.assertLessEqual(relative(part.numpy(), torch_logits[:batch - 1]), 1e-6)
        # Inference mode: training-mode batch norms (batch statistics) give other logits.
        with torch.no_grad():
            trainlike = self.batch_statistics_logits(m, x)
        self.assertGreater(relative(trainlike, torch_logits), 1e-3)

    def batch_statistics_logits(self, m, x):
        """The same model with each batch norm normalising by the batch's statistics."""
        saved = onnx_torch.OPS["BatchNormalization"]
        onnx_torch.OPS["BatchNormalization"] = lambda i, a: torch.nn.functional.batch_norm(
            i[0], None, None, i[1], i[2], training=True, eps=1e-5)
        try:
            return onnx_torch.run(m, {m.graph.input[0].name: torch.from_numpy(x)})[0].numpy()
        finally:
            onnx_torch.OPS["BatchNormalization"] = saved

    def test_small_cnn(self):
        self.check_model("small_cnn", 8, 28, 1)

    def test_resnet18(self):
        self.check_model("resnet18", 4, 32, 3, options=("--image_size", "32"))

    def check_graph(self, name, onnx_ops):
        """An example graph trained 3 steps, exported, run by PyTorch from the file against
        Headroom's logits of the trained graph, at its batch and at one sample fewer."""
        graph = os.path.join(EXAMPLES, name + ".pbtxt")
        d = os.path.join(self.tmp.name, name)
        os.makedirs(d)
        run(HEADROOM, "train", "--graph", graph, "--steps", "3", "--export",
            os.path.join(d, "run"))
        path = os.path.join(d, "model.onnx")
        run(HEADROOM, "export", "--graph", graph, "--checkpoint", os.path.join(d, "run"),
            "--out", path)
        m = self.onnx_pb2.ModelProto()
        with open(path, "rb") as f:
            m.ParseFromString(f.read())
        ops = [n.op_type for n in m.graph.node]
        for op in onnx_ops:
            self.assertIn(op, ops)
        inp = m.graph.input[0]
        self.assertEqual(inp.type.tensor_type.shape.dim[0].dim_param, "batch")
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        # The input's shape as the graph declares it (its batch first).
        shape_line = [l for l in open(graph) if f'name: "{inp.name}"' in l and "shape" in l][0]
        shape = [int(v) for v in shape_line.split("shape: [")[1].split("]")[0].split(",")]
        batch = shape[0]
        x = np.random.default_rng(7).standard_normal(shape).astype(np.float32)
        inputs = os.path.join(d, "inputs.bin")
        x.tofile(inputs)
        with torch.no_grad():
            torch_logits = onnx_torch.run(m, {inp.name: torch.from_numpy(x)})[0].numpy()
            part = onnx_torch.run(m, {inp.name: torch.from_numpy(x[:batch - 1])})[0].numpy()
        trained_bin = os.path.join(d, "trained.bin")
        run(LOGITS, "--graph", graph, "--batch", batch, "--checkpoint", os.path.join(d, "run"),
            "--inputs", inputs, "--out", trained_bin)
        trained = np.fromfile(trained_bin, dtype=np.float32).reshape(torch_logits.shape)
        back_bin = os.path.join(d, "back.bin")
        run(LOGITS, "--onnx", path, "--batch", batch, "--inputs", inputs, "--out", back_bin)
        back = np.fromfile(back_bin, dtype=np.float32).reshape(torch_logits.shape)
        error = relative(trained, torch_logits)
        print(f"{name}: {len(ops)} ONNX nodes ({', '.join(sorted(set(onnx_ops)))}); Headroom's "
              f"trained graph against PyTorch on the export: relative error {error:.2e}; "
              f"imported back: {relative(back, trained):.2e}; batch {batch - 1} against {batch}: "
              f"{relative(part, torch_logits[:batch - 1]):.2e}")
        self.assertEqual(dims[1:], shape[1:])
        self.assertLessEqual(error, TOLERANCE)
        self.assertLessEqual(relative(back, trained), TOLERANCE)
        self.assertLessEqual(relative(part, torch_logits[:batch - 1]), 1e-6)

    def test_reductions(self):
        self.check_graph("tiny_reduce", ["ReduceMax", "ReduceMin", "ReduceSum", "Slice"])

    def test_resizes_and_transposed_convolutions(self):
        self.check_graph("tiny_upsample", ["ConvTranspose", "Resize", "Shape"])

    def test_group_and_instance_norms(self):
        self.check_graph("tiny_segmentation", ["InstanceNormalization", "Reshape", "Mul", "Add"])

    def test_errors_name_the_file_and_the_tensor(self):
        d = os.path.join(self.tmp.name, "errors")
        os.makedirs(d)
        out = os.path.join(d, "m.onnx")
        missing = subprocess.run([HEADROOM, "export", "--model", "small_cnn", "--batch", "4",
                                  "--checkpoint", os.path.join(d, "none"), "--out", out],
                                 capture_output=True, text=True)
        self.assertNotEqual(missing.returncode, 0)
        self.assertIn("no such file", missing.stderr)
        corrupt = os.path.join(d, "corrupt.ckpt")
        with open(corrupt, "wb") as f:
            f.write(b"\xff\xff\xff not a checkpoint")
        bad = subprocess.run([HEADROOM, "export", "--model", "small_cnn", "--batch", "4",
                              "--checkpoint", corrupt, "--out", out], capture_output=True, text=True)
        self.assertNotEqual(bad.returncode, 0)
        self.assertIn("not a Headroom checkpoint", bad.stderr)
        # A checkpoint of another model: small_cnn's weights for an mlp.
        run(HEADROOM, "train", "--model", "small_cnn", "--batch", "4", "--steps", "1", "--export",
            os.path.join(d, "cnn"))
        other = subprocess.run([HEADROOM, "export", "--model", "mlp", "--batch", "4",
                                "--checkpoint", os.path.join(d, "cnn"), "--out", out],
                               capture_output=True, text=True)
        self.assertNotEqual(other.returncode, 0)
        self.assertIn("another model", other.stderr)
        self.assertFalse(os.path.exists(out))


if __name__ == "__main__":
    HEADROOM, LOGITS = sys.argv[1], sys.argv[2]
    EXAMPLES = os.path.dirname(os.path.abspath(sys.argv[3]))
    unittest.main(argv=sys.argv[:1], verbosity=2)
