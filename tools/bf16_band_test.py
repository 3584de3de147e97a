"""bf16's loss band on real data, bounded: the mlp (3 hidden layers of 256) trained 50 steps
on 3,200 Fashion-MNIST images in float32 and in --precision bf16 (tools/bf16_band_bench.py's
runs, same seed, so the same weights and order) learns alike:
  - both curves fall (the smoothed loss at the end under 0.6x the first loss; measured
    1.11 against 2.30): a run that does not learn cannot pass the band by being flat;
  - the trailing means over 10 steps stay within 1.5% of each other at every step (measured
    0.32% at most, 0.09% on average: `bf16_band_bench.py`'s band, docs/planner.md "Loss
    band");
  - the held-out accuracies (800 images) within 3 points (measured 63.1% and 62.3%).
Run by `bazel test //tools:bf16_band_test` (Debian's /usr/bin/python3 and the headroom binary).
"""

import gzip
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bf16_band_bench  # noqa: E402
import fashion_mnist_bench  # noqa: E402

HEADROOM = os.path.join(os.environ.get("TEST_SRCDIR", ""), "headroom", "clients", "headroom")
ITEMS = 4000  # 3,200 to train on (50 batches of 64), 800 held out.
WINDOW = 10


def WriteIdx(path, array):
    """Writes `array` (uint8) as a gzip-compressed IDX file."""
    with gzip.open(path, "wb") as f:
        f.write(struct.pack(">BBBB", 0, 0, 0x08, array.ndim))
        f.write(b"".join(struct.pack(">I", d) for d in array.shape))
        f.write(array.tobytes())


def MakeSubset(directory):
    """Writes the first ITEMS Fashion-MNIST training images as a dataset directory."""
    images = fashion_mnist_bench.ReadIdx(
        os.path.join(fashion_mnist_bench.FASHION, "train-images-idx3-ubyte.gz"))[:ITEMS]
    labels = fashion_mnist_bench.ReadIdx(
        os.path.join(fashion_mnist_bench.FASHION, "train-labels-idx1-ubyte.gz"))[:ITEMS]
    WriteIdx(os.path.join(directory, "00000.images.idx.gz"), images)
    WriteIdx(os.path.join(directory, "00000.labels.idx.gz"), labels)
    with open(os.path.join(directory, "index.txt"), "w") as f:
        f.write("headroom-dataset 1\nclasses 10\nshard 00000.images.idx.gz 00000.labels.idx.gz\n")


class Bf16BandTest(unittest.TestCase):

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        data = os.path.join(cls.tmp, "set")
        os.makedirs(data)
        MakeSubset(data)
        cls.runs = {}
        for precision in ("fp32", "bf16"):
            cls.runs[precision] = bf16_band_bench.RunHeadroom(
                HEADROOM, "mlp", precision, 64, 1, 0.05, 1, os.path.join(cls.tmp, precision),
                dataset=data, extra=["--validation-fraction", "0.2"])

    def testBothCurvesFallAndStayWithinTheBand(self):
        fp32 = self.runs["fp32"]["losses"]
        bf16 = self.runs["bf16"]["losses"]
        self.assertEqual(len(fp32), 50)
        self.assertEqual(len(bf16), 50)
        self.assertEqual(self.runs["bf16"]["summary"]["precision"], "bf16")
        for losses in (fp32, bf16):
            smoothed = bf16_band_bench.Smoothed(losses, WINDOW)
            self.assertLess(smoothed[-1], 0.6 * losses[0], losses)
        band = bf16_band_bench.Band(bf16, fp32, WINDOW)
        self.assertLess(band["max"], 0.015, "band %s\nfp32 %s\nbf16 %s" % (band, fp32, bf16))

    def testHeldOutAccuraciesAgree(self):
        fp32 = self.runs["fp32"]["summary"]["eval_accuracy"]
        bf16 = self.runs["bf16"]["summary"]["eval_accuracy"]
        self.assertGreater(fp32, 0.5)  # Ten classes: chance is 0.1.
        self.assertLess(abs(bf16 - fp32), 0.03, (fp32, bf16))

    def testBandOfKnownCurves(self):
        # Trailing means over 2 of [4, 2, 2, 2] and [4, 2, 2, 1]: 3, 2, 2 and 3, 2, 1.5.
        band = bf16_band_bench.Band([4, 2, 2, 2], [4, 2, 2, 1], 2)
        self.assertAlmostEqual(band["max"], 0.5 / 1.5)
        self.assertEqual(band["at_step"], 3)
        self.assertAlmostEqual(band["mean"], (0.5 / 1.5) / 3)
        with self.assertRaises(ValueError):
            bf16_band_bench.Band([1, 2], [1], 1)


if __name__ == "__main__":
    unittest.main()
