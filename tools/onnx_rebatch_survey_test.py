#!/usr/bin/python3
"""Tests of re-batching through the command line: a channel shuffle exported as PyTorch's
tutorial exports it (batch 1, no dynamic_axes, inference mode) plans at batch 8, its logits
match PyTorch's, and the inference export is named (and refused with --strict-training).

    /usr/bin/python3 tools/onnx_rebatch_survey_test.py HEADROOM ONNX_LOGITS
(bazel test //tools:onnx_rebatch_survey_test passes the built binaries).
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch
import torch.nn as nn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import onnx_rebatch_survey as survey  # noqa: E402

BINARIES = argparse.Namespace(headroom="", logits="", batch=8)


class Shuffle(nn.Module):
    """Conv, batch norm and ReLU, shufflenet's channel shuffle, a flatten and a classifier."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(8)
        self.fc = nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.conv(x)))
        n, c, h, w = x.size()
        x = x.view(n, 2, c // 2, h, w).transpose(1, 2).contiguous().view(n, -1, h, w)
        x = nn.functional.max_pool2d(x, 2)
        return self.fc(x.view(x.size(0), -1))


def headroom(*args):
    return subprocess.run([BINARIES.headroom] + list(args), capture_output=True, text=True)


class RebatchTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="rebatch-test-")
        torch.manual_seed(0)
        self.model = Shuffle().eval()
        self.path = os.path.join(self.dir, "shuffle.onnx")
        with torch.no_grad():
            torch.onnx.export(self.model, torch.randn(1, 3, 8, 8), self.path)

    def testTheTutorialExportPlansAtBatchEightAndIsNamedAnInferenceExport(self):
        p = headroom("plan", "--onnx", self.path, "--batch", "8", "--json")
        self.assertEqual(p.returncode, 0, p.stderr)
        plan = json.loads(p.stdout.strip().splitlines()[-1])
        self.assertTrue(plan["inference_export"])
        self.assertIn("training=torch.onnx.TrainingMode.TRAINING", plan["warnings"][0])
        self.assertIn("warning: ", p.stderr)
        self.assertGreater(int(plan["summary"]["arena_bytes"]), 0)
        strict = headroom("plan", "--onnx", self.path, "--batch", "8", "--strict-training")
        self.assertNotEqual(strict.returncode, 0)
        self.assertIn("--strict-training", strict.stderr)

    def testLogitsAtBatchOneAndEightMatchPyTorch(self):
        x = torch.randn(8, 3, 8, 8, generator=torch.Generator().manual_seed(1))
        for inputs in (x[:1], x):
            theirs = survey.reference_logits(self.model, inputs, kept=set())
            ours = survey.headroom_logits(BINARIES, self.path, inputs, self.dir)
            error = survey.relative_error(ours, theirs)
            print("batch %d: relative error %.1e" % (inputs.shape[0], error), file=sys.stderr)
            self.assertLess(error, survey.TARGET)

    def testATrainingExportHasNoWarning(self):
        path = os.path.join(self.dir, "training.onnx")
        with torch.no_grad():
            torch.onnx.export(self.model.train(), torch.randn(1, 3, 8, 8), path,
                              training=torch.onnx.TrainingMode.TRAINING,
                              do_constant_folding=False)
        g = headroom("graph", "--onnx", path, "--batch", "8", "--json", "--strict-training")
        self.assertEqual(g.returncode, 0, g.stderr)
        summary = json.loads(g.stdout.strip().splitlines()[-1])
        self.assertFalse(summary["inference_export"])
        self.assertEqual(summary["warnings"], [])
        self.assertEqual(summary["nodes_by_op"]["BatchNorm"], 1)


class SurveyTest(unittest.TestCase):
    def testShufflenetExportedAtBatchOneMatchesAtOneAndEight(self):
        scratch = tempfile.mkdtemp(prefix="rebatch-survey-")
        row = survey.survey_one("shufflenet_v2_x0_5", BINARIES, scratch)
        print(row, file=sys.stderr)
        self.assertEqual(row["status"], "ok", row.get("reason"))
        self.assertTrue(row["inference_export"])
        self.assertLess(row["error_at_8"], survey.TARGET)


if __name__ == "__main__":
    BINARIES.headroom, BINARIES.logits = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    unittest.main(argv=sys.argv[:1])
