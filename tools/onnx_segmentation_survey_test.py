#!/usr/bin/python3
"""Tests of the segmentation survey through the command line: norms_test (GroupNorm,
InstanceNorm, [N, 5, H, W] logits) imports with PyTorch's parameters, its logits match
PyTorch's and it trains under 60% of its arena with the per-pixel loss; a model with an op
the importer lacks is reported blocked by that op.

    /usr/bin/python3 tools/onnx_segmentation_survey_test.py HEADROOM ONNX_LOGITS
(bazel test //tools:onnx_segmentation_survey_test passes the built binaries).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_segmentation_survey as survey  # noqa: E402

ARGS = argparse.Namespace(headroom="", onnx_logits="", batch=2, image_size=32,
                          budget_fraction=0.6, steps=3, seed=0)


class GridSampler(nn.Module):
    """A convolution and grid_sample, an op Headroom has no form of."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)

    def forward(self, x):
        grid = torch.zeros(x.shape[0], 4, 4, 2)
        return nn.functional.grid_sample(self.conv(x), grid, align_corners=False)


class SegmentationSurveyTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="segmentation-survey-test-")

    def testNormsTestImportsMatchesAndTrainsUnderTheBudget(self):
        row = survey.survey_one("norms_test", ARGS, self.dir)
        self.assertEqual(row["status"], "ok", row)
        self.assertTrue(row["parameters_equal"], row)
        self.assertLess(row["logits_relative_error"], 1e-4, row)
        self.assertLess(row["headroom_float64_error"], 1e-4, row)
        self.assertIn("torch_float64_error", row)
        # PyTorch against itself: measured, and restored to its settings afterwards.
        self.assertGreaterEqual(row["torch_self_error"], 0.0, row)
        self.assertTrue(torch.backends.mkldnn.enabled)
        self.assertTrue(row["trained"], row)
        self.assertEqual(len(row["losses"]), ARGS.steps)
        self.assertLessEqual(row["measured_peak_bytes"], row["budget_bytes"])
        self.assertLess(row["budget_bytes"], row["arena_bytes"])

    def testAnOpTheImporterLacksIsNamedAsBlocking(self):
        path = os.path.join(self.dir, "grid.onnx")
        torch.onnx.export(GridSampler(), torch.randn(2, 3, 8, 8), path, opset_version=17,
                          training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False,
                          input_names=["images"], dynamic_axes={"images": {0: "batch"}})
        p = subprocess.run([ARGS.headroom, "graph", "--onnx", path, "--batch", "2"],
                           capture_output=True, text=True)
        self.assertNotEqual(p.returncode, 0)
        self.assertEqual(survey.blocking_ops(p.stderr.strip()), "GridSample x1", p.stderr)
        self.assertIsNone(survey.blocking_ops("ONNX node '/x' (Pow): its exponent must be known"))


if __name__ == "__main__":
    ARGS.headroom = os.path.abspath(sys.argv[1])
    ARGS.onnx_logits = os.path.abspath(sys.argv[2])
    unittest.main(argv=sys.argv[:1])
