#!/usr/bin/python3
"""Writes PyTorch 1.13's float32 values and gradients of the activations imported from ONNX,
for //executor/cpu:activation_parity_test to compare the CPU backend against.

Run with Debian's interpreter: /usr/bin/python3 tools/torch_activations.py --out DIR

For each case below, DIR/<case>.bin holds four float32 arrays of N little-endian values
each: x, dy, y = op(x) and dx = dy * op'(x) from autograd. x covers [-30, 30] evenly, the
kinks (0 and -0), Softplus's threshold 20 and its float neighbours, and values far out;
for Sqrt and Pow to 0.5 and 1.5, its absolute value.
"""

import argparse
import os

import torch
import torch.nn.functional as F

N = 4096

# case name -> function of x; the names are what the C++ test reads (op and attributes).
CASES = {
    "LeakyReLU": lambda x: F.leaky_relu(x),
    "LeakyReLU_alpha0.2": lambda x: F.leaky_relu(x, 0.2),
    "ELU": lambda x: F.elu(x),
    "ELU_alpha0.5": lambda x: F.elu(x, alpha=0.5),
    "SELU": lambda x: F.selu(x),
    "Softplus": lambda x: F.softplus(x),
    "Sqrt": lambda x: torch.sqrt(x),
    "Erf": lambda x: torch.erf(x),
    "Mish": lambda x: F.mish(x),
    "Pow_exponent2": lambda x: torch.pow(x, 2.0),
    "Pow_exponent3": lambda x: torch.pow(x, 3.0),
    "Pow_exponent0.5": lambda x: torch.pow(x, 0.5),
    "Pow_exponent-1": lambda x: torch.pow(x, -1.0),
    "Pow_exponent1.5": lambda x: torch.pow(x, 1.5),
}


def inputs(case):
    special = [0.0, -0.0, 1e-30, -1e-30, 1e-7, -1e-7, 20.0, 19.999998, 20.000002, -20.0,
               -87.0, -100.0, 88.0, 100.0, 1e4, -1e4]
    x = torch.cat([torch.linspace(-30, 30, N - len(special)), torch.tensor(special)])
    return x.abs() if case in ("Sqrt", "Pow_exponent0.5", "Pow_exponent1.5") else x


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    for case, fn in CASES.items():
        x = inputs(case).float().requires_grad_(True)
        dy = torch.rand(N, generator=g) + 0.5
        y = fn(x)
        y.backward(dy)
        arrays = [x.detach(), dy, y.detach(), x.grad]
        with open(os.path.join(args.out, case + ".bin"), "wb") as f:
            for a in arrays:
                f.write(a.contiguous().numpy().astype("<f4").tobytes())


if __name__ == "__main__":
    main()
