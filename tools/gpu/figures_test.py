#!/usr/bin/env python3
"""figures.py on the outputs of a GPU run, fabricated: what no GPU-less run can exercise.

A scratch folder as run.sh leaves it (steps.tsv, gtest XML, train JSON lines, exports, the
PyTorch times, a profile and a sanitizer log) goes in; figures.json must say which pairs are
bitwise equal and which differ, count the test cases, take the step-time ratios, set CUPTI's
peak against arena + workspace + fixed cost, and count the sanitizer's errors.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
FIGURES = os.path.join(HERE, "figures.py")

GTEST_XML = """<?xml version="1.0" encoding="UTF-8"?>
<testsuites tests="3" failures="1" disabled="0" errors="0" name="AllTests">
  <testsuite name="CudaBackendTest" tests="3" failures="1" skipped="1">
    <testcase name="Relu" status="run" result="completed" classname="CudaBackendTest" />
    <testcase name="Relu6Backward" status="run" result="completed" classname="CudaBackendTest">
      <failure message="Expected equality" type=""></failure>
    </testcase>
    <testcase name="Huge" status="run" result="skipped" classname="CudaBackendTest">
      <skipped message="no GPU" />
    </testcase>
  </testsuite>
</testsuites>
"""


def write(path, text, mode="w"):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, mode) as f:
        f.write(text)


def train_lines(losses, median, **summary):
    lines = [json.dumps({"step": i, "loss": l, "step_seconds": median}) for i, l in enumerate(losses)]
    s = {"summary": True, "median_step_seconds": median}
    s.update(summary)
    return "\n".join(lines + [json.dumps(s)]) + "\n"


def export(scratch, name, losses, state):
    write(os.path.join(scratch, "exp", name, "headroom.json"), json.dumps({"losses": losses}))
    write(os.path.join(scratch, "exp", name, "final_state.bin"), state, "wb")


class FiguresTest(unittest.TestCase):
    def run_figures(self, scratch, out):
        r = subprocess.run([sys.executable, FIGURES, "--scratch", scratch, "--out", out,
                            "--gpu", "NVIDIA H100", "--seconds", "300", "--budget", "540"],
                           capture_output=True, text=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(os.path.join(out, "figures.json")) as f:
            return json.load(f), r.stdout

    def test_a_gpu_run(self):
        with tempfile.TemporaryDirectory() as d:
            scratch, out = os.path.join(d, "scratch"), os.path.join(d, "out")
            os.makedirs(out)
            write(os.path.join(scratch, "steps.tsv"),
                  "test:cuda_backend_test\tfail\t1\t20\texit 1\n"
                  "test:device_info_test\tpass\t0\t1\t1s\n"
                  "train:r50_plain\tpass\t0\t40\t40s\n")
            write(os.path.join(scratch, "xml", "cuda_backend_test.xml"), GTEST_XML)
            losses = [6.9, 6.5, 6.1]
            write(os.path.join(scratch, "runs", "r50_plain.jsonl"),
                  train_lines(losses, 0.2, fixed_device_bytes=500, workspace_bytes=100))
            write(os.path.join(scratch, "runs", "r50_sectioned.jsonl"),
                  train_lines(losses, 0.25, steps=3, num_sections=4, offloaded_bytes_per_step=1000,
                              copy_wait_seconds=0.03))
            write(os.path.join(scratch, "runs", "gpt_a.jsonl"), train_lines([5.0, 4.0], 0.1))
            export(scratch, "r50_plain", losses, b"\x01\x02")
            export(scratch, "r50_sectioned", losses, b"\x01\x02")
            export(scratch, "r18_a", [2.0, 1.5], b"\x05")
            export(scratch, "r18_b", [2.0, 1.5], b"\x06")       # same losses, other parameters
            export(scratch, "gpt_a", [5.0, 4.0], b"\x07")
            export(scratch, "gpt_b", [5.0, 4.000001], b"\x07")  # other losses
            write(os.path.join(scratch, "torch.jsonl"),
                  json.dumps({"model": "resnet50", "median_step_seconds": 0.1}) + "\n" +
                  json.dumps({"model": "transformer", "median_step_seconds": 0.05}) + "\n")
            write(os.path.join(out, "profile.json"), json.dumps({
                "plan": {"arena_bytes": "4000"}, "workspace_bytes": "100",
                "physical": {"peak_device_bytes": "4700", "expected_bytes": "4100"},
                "copy_to_host_bytes_per_second": 10000.0, "copy_to_device_bytes_per_second": 10000.0}))
            write(os.path.join(out, "sanitizer.log"),
                  "===== sanitizer:memcheck:cnn (12:00:00, limit 75s): ...\n"
                  "========= ERROR SUMMARY: 0 errors\n"
                  "===== sanitizer:racecheck:cnn (12:01:00, limit 75s): ...\n"
                  "========= ERROR SUMMARY: 3 errors\n")

            f, printed = self.run_figures(scratch, out)

            self.assertTrue(f["gpu_present"])
            self.assertEqual(f["counts"], {"pass": 2, "fail": 1, "skip": 0})
            t = f["tests"]["cuda_backend_test"]
            self.assertEqual((t["cases"], t["passed"], t["failed"], t["skipped"]), (3, 1, 1, 1))
            self.assertEqual(t["failed_cases"], ["CudaBackendTest.Relu6Backward"])
            self.assertIsNone(f["tests"]["device_info_test"]["cases"])  # no XML: not counted
            b = f["bitwise"]
            self.assertEqual(b["resnet50_b64_sectioned_offload_vs_plain"]["verdict"], "bitwise")
            self.assertEqual(b["determinism_resnet18_b32"]["verdict"], "differ")
            self.assertFalse(b["determinism_resnet18_b32"]["final_state_equal"])
            self.assertEqual(b["determinism_transformer_dropout_adam"]["verdict"], "differ")
            self.assertFalse(b["determinism_transformer_dropout_adam"]["losses_equal"])
            self.assertAlmostEqual(f["step_seconds"]["resnet50_b64"]["headroom_over_pytorch"], 2.0)
            self.assertAlmostEqual(
                f["step_seconds"]["transformer_4x768_b8_s256_adam"]["headroom_over_pytorch"], 2.0)
            c = f["cupti"]
            self.assertEqual(c["fixed_cost_bytes"], 500)             # from r50_plain's summary
            self.assertEqual(c["arena_plus_workspace_plus_fixed_bytes"], 4600)
            self.assertEqual(c["physical_minus_accounted_bytes"], 100)
            o = f["offload"]
            self.assertAlmostEqual(o["slowdown_seconds"], 0.05)
            self.assertAlmostEqual(o["copy_seconds_estimate"], 0.2)
            self.assertAlmostEqual(o["hidden_fraction_lower_bound"], 0.75)
            self.assertAlmostEqual(o["exposed_copy_seconds_per_step"], 0.01)
            self.assertAlmostEqual(o["hidden_fraction"], 0.95)
            self.assertIn("OFFLOAD 1000 B/step", printed)
            self.assertEqual(f["sanitizer"], {"sanitizer:memcheck:cnn": {"errors": 0},
                                              "sanitizer:racecheck:cnn": {"errors": 3}})
            self.assertIn("CASES cuda_backend_test", printed)
            self.assertIn("CudaBackendTest.Relu6Backward", printed)

    def test_every_case_skipped_is_a_skip(self):
        with tempfile.TemporaryDirectory() as d:
            scratch, out = os.path.join(d, "scratch"), os.path.join(d, "out")
            os.makedirs(out)
            write(os.path.join(scratch, "steps.tsv"), "test:device_info_test\tpass\t0\t1\t1s\n")
            write(os.path.join(scratch, "xml", "device_info_test.xml"),
                  '<testsuites><testsuite name="D">'
                  '<testcase name="A" result="skipped" classname="D"><skipped/></testcase>'
                  '</testsuite></testsuites>')
            f, _ = self.run_figures(scratch, out)
            self.assertEqual(f["tests"]["device_info_test"]["status"], "skip")
            self.assertEqual(f["cupti"]["physical_peak_bytes"], None)


if __name__ == "__main__":
    unittest.main()
