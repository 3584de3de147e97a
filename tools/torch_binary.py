#!/usr/bin/python3
"""Writes PyTorch 1.13's float32 values and gradients of Sub, Div and PReLU with broadcasting, for
//executor/cpu:binary_parity_test to compare the CPU backend against.

Run with Debian's interpreter: /usr/bin/python3 tools/torch_binary.py --out DIR

For each case below, DIR/<case>.bin holds six float32 arrays, little-endian, in order:
a, b, dy, y = op(a, b), da and db from autograd (each of its own shape, listed in SHAPES).
a is uniform in [-4, 4); b too, but for Div in [0.25, 4) with a random sign. For PReLU, a is
x (a quarter of it 0 or -0, the kink) and b the slope per channel, in [0, 1).
"""

import argparse
import os

import torch

# case name -> (op, a's shape, b's shape); the C++ test repeats these shapes.
CASES = {
    "Sub_same": ("Sub", [64, 64], [64, 64]),
    "Sub_broadcast": ("Sub", [8, 1, 32], [16, 1]),
    "Div_same": ("Div", [64, 64], [64, 64]),
    "Div_broadcast": ("Div", [8, 1, 32], [16, 1]),
    "PReLU_channels": ("PReLU", [4, 3, 5, 5], [3, 1, 1]),
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    for case, (op, a_shape, b_shape) in CASES.items():
        a = (torch.rand(a_shape, generator=g) * 8 - 4).requires_grad_(True)
        b = torch.rand(b_shape, generator=g) * 8 - 4
        if op == "Div":
            sign = torch.where(torch.rand(b_shape, generator=g) < 0.5, -1.0, 1.0)
            b = (torch.rand(b_shape, generator=g) * 3.75 + 0.25) * sign
        if op == "PReLU":
            with torch.no_grad():
                kink = torch.rand(a_shape, generator=g)
                a[kink < 0.125] = 0.0
                a[(kink >= 0.125) & (kink < 0.25)] = -0.0
            b = torch.rand(b_shape, generator=g)
        b.requires_grad_(True)
        if op == "PReLU":
            y = torch.nn.functional.prelu(a, b.reshape(-1))
        else:
            y = a - b if op == "Sub" else a / b
        dy = torch.rand(y.shape, generator=g) + 0.5
        y.backward(dy)
        arrays = [a.detach(), b.detach(), dy, y.detach(), a.grad, b.grad]
        with open(os.path.join(args.out, case + ".bin"), "wb") as f:
            for t in arrays:
                f.write(t.contiguous().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
