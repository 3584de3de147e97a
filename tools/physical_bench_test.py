#!/usr/bin/python3
"""Tests of tools/physical_bench.py: its PyTorch model, its instruments and its verdicts.

Run with Debian's interpreter: /usr/bin/python3 tools/physical_bench_test.py
"""

import os
import sys
import unittest

import torch
import torch.nn as nn
import torchvision
from torch.utils.checkpoint import checkpoint_sequential

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import physical_bench as bench  # noqa: E402


class FlatResnetTest(unittest.TestCase):
    def testComputesWhatTorchvisionComputes(self):
        torch.manual_seed(0)
        flat = bench.flat_resnet("resnet18").eval()
        torch.manual_seed(0)
        reference = torchvision.models.resnet18(weights=None, num_classes=1000).eval()
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            torch.testing.assert_close(flat(x), reference(x))

    def testNoReluIsInPlace(self):
        model = bench.flat_resnet("resnet50")
        relus = [m for m in model.modules() if isinstance(m, nn.ReLU)]
        self.assertTrue(relus)
        self.assertFalse([m for m in relus if m.inplace])

    def testCheckpointingChangesNoGradient(self):
        torch.manual_seed(0)
        model = bench.flat_resnet("resnet18")
        x = torch.randn(2, 3, 64, 64, requires_grad=True)
        model(x).sum().backward()
        plain = [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
        checkpoint_sequential(model, 4, x).sum().backward()
        for expected, param in zip(plain, model.parameters()):
            torch.testing.assert_close(param.grad, expected, rtol=1e-4, atol=1e-5)


class InstrumentTest(unittest.TestCase):
    def testGnuTimeSeesAnAllocation(self):
        touch = "b = bytearray(200 * 2**20)"
        _, idle, _ = bench.run_under_time(["/usr/bin/python3", "-c", "pass"], {})
        _, busy, _ = bench.run_under_time(["/usr/bin/python3", "-c", touch], {})
        print(f"idle {idle} B, with 200 MiB touched {busy} B", file=sys.stderr)
        self.assertGreaterEqual(busy - idle, 190 * 2**20)

    def testMedianLeavesOutTheWarmUpStep(self):
        self.assertEqual(bench.median_after_warmup([9.0, 1.0, 2.0, 3.0]), 2.0)
        self.assertEqual(bench.median_after_warmup([5.0]), 5.0)


class VerdictTest(unittest.TestCase):
    def testUnconstrainedRowJudgesGrowth(self):
        self.assertIn("NOT met", bench.target_cell(0, True, 1.01, 9.0))
        self.assertIn(": met", bench.target_cell(0, True, 1.0, 0.1))

    def testCheckpointedRowNeedsGrowthAndSpeedup(self):
        self.assertIn(": met", bench.target_cell(4, False, 0.99, 1.2))
        self.assertIn("NOT met", bench.target_cell(4, False, 0.99, 1.19))
        self.assertIn("growth above", bench.target_cell(4, False, 1.01, 3.0))
        self.assertEqual(bench.target_cell(0, False, 0.5, 3.0), "-")

    def testOneInfeasibleRunMakesThePointInfeasible(self):
        ok = {"growth_bytes": 1, "median_step_seconds": 1.0, "other_cores": 0.0,
              "summary": {"predicted_peak_bytes": 1, "num_sections": 2}}
        summary = bench.headroom_summary([ok, {"infeasible": "budget too small"}])
        self.assertEqual(summary["infeasible"], "budget too small")
        self.assertNotIn("growth_bytes", summary)

    def testBudgetLeavesRoomForTheFixedCost(self):
        runs = [{"growth_bytes": 700 * bench.MIB, "median_step_seconds": 1.0,
                 "other_cores": 0.0}]
        free = {"growth_bytes": 900 * bench.MIB}
        point = bench.plan_point(2, runs, free, fixed_cost=500 * bench.MIB)
        self.assertEqual(point["budget_bytes"], 200 * bench.MIB)
        self.assertIsNone(bench.plan_point(2, runs, {"growth_bytes": 600 * bench.MIB},
                                           500 * bench.MIB)["budget_bytes"])

    def testHeadroomsOwnAccountingIsPrintedWhenReported(self):
        result = {"model": "m", "headroom_unconstrained": {"host_pool_bytes": 3 * bench.MIB},
                  "points": [{"budget_bytes": None, "headroom": {}}]}
        self.assertEqual(bench.own_accounting_lines(result),
                         ["- m unconstrained, Headroom's own accounting: host_pool_bytes 3.0 MiB"])
        result["headroom_unconstrained"] = {"growth_bytes": 1}
        self.assertEqual(bench.own_accounting_lines(result), [])


if __name__ == "__main__":
    unittest.main()
