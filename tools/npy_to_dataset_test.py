"""npy_to_dataset.py against the C++ reader: a converted directory, loaded by data's
dataset_info as training loads it, holds NumPy's items, labels and pixel sums; bad arrays are
errors naming the file."""
import os
import subprocess
import sys
import tempfile
import unittest

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import npy_to_dataset  # noqa: E402

DATASET_INFO = os.path.join(os.environ.get("TEST_SRCDIR", ""), "headroom", "data", "dataset_info")


def info(directory):
    out = subprocess.run([DATASET_INFO, directory], check=True, capture_output=True, text=True)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())


class NpyToDatasetTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.mkdtemp(dir=os.environ.get("TEST_TMPDIR"))
        self.rng = np.random.default_rng(3)

    def save(self, name, array):
        path = os.path.join(self.tmp, name)
        np.save(path, array)
        return path

    def test_bytes_round_trip_through_the_cpp_reader(self):
        images = self.rng.integers(0, 256, size=(25, 5, 6), dtype=np.uint8)
        labels = self.rng.integers(0, 7, size=25)
        out = os.path.join(self.tmp, "bytes")
        shards = npy_to_dataset.convert(self.save("i.npy", images), self.save("l.npy", labels),
                                        out, classes=7, shard_items=10)
        self.assertEqual(shards, 3)
        got = info(out)
        self.assertEqual(got["items"], "25")
        self.assertEqual(got["classes"], "7")
        self.assertEqual(got["shape"], "1 5 6")
        self.assertEqual(int(got["label_sum"]), int(labels.sum()))
        # The reader divides each byte by 255 in float32, as torchvision's ToTensor.
        expected = (images.astype(np.float32) / np.float32(255)).astype(np.float64).sum()
        self.assertAlmostEqual(float(got["pixel_sum"]), expected, delta=1e-6 * expected)

    def test_floats_round_trip_with_channels(self):
        images = self.rng.standard_normal((9, 3, 4, 4)).astype(np.float32)
        labels = self.rng.integers(0, 2, size=9)
        out = os.path.join(self.tmp, "floats")
        npy_to_dataset.convert(self.save("i.npy", images), self.save("l.npy", labels), out)
        got = info(out)
        self.assertEqual(got["shape"], "3 4 4")
        self.assertEqual(got["classes"], "2")
        self.assertAlmostEqual(float(got["pixel_sum"]), images.astype(np.float64).sum(), delta=1e-4)

    def test_bad_arrays_are_errors_naming_the_file(self):
        good = self.save("good.npy", np.zeros((4, 2, 2), np.uint8))
        cases = [
            (self.save("f64.npy", np.zeros((4, 2, 2))), self.save("l4.npy", np.zeros(4, int)),
             "f64.npy: dtype float64"),
            (self.save("flat.npy", np.zeros((4, 4), np.uint8)), self.save("l4b.npy", np.zeros(4, int)),
             "flat.npy: shape [4, 4]"),
            (good, self.save("l3.npy", np.zeros(3, int)), "l3.npy: 3 labels for 4 images"),
            (good, self.save("neg.npy", np.array([0, 1, -1, 0])), "neg.npy: item 2 has label -1"),
        ]
        for images, labels, message in cases:
            with self.assertRaises(ValueError) as e:
                npy_to_dataset.convert(images, labels, os.path.join(self.tmp, "never"), classes=2)
            self.assertIn(message, str(e.exception))
        self.assertFalse(os.path.exists(os.path.join(self.tmp, "never")))


if __name__ == "__main__":
    unittest.main()
