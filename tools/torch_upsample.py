#!/usr/bin/python3
"""Writes PyTorch 1.13's float32 values and gradients of F.interpolate (nearest, bilinear) and
nn.ConvTranspose2d, for //executor/cpu:upsample_parity_test to compare the CPU backend against.

Run with Debian's interpreter: /usr/bin/python3 tools/torch_upsample.py --out DIR

For each case below, DIR/<case>.bin holds float32 arrays, little-endian, in order:
- Resize cases: x, dy, y = F.interpolate(x, ...), dx from autograd;
- ConvTranspose cases: x, weight, bias (absent without one), dy, y, dx, dweight, dbias.
x, weight and bias are uniform in [-1, 1); dy in [0.5, 1.5).
"""

import argparse
import os

import torch
import torch.nn.functional as F

# case name -> (x's shape, F.interpolate's keywords); the C++ test repeats these.
RESIZE = {
    "nearest_up": ([2, 3, 5, 7], dict(size=(11, 16), mode="nearest")),
    "nearest_x2": ([2, 3, 5, 7], dict(scale_factor=2.0, mode="nearest")),
    "nearest_scale": ([2, 3, 5, 7], dict(scale_factor=1.7, mode="nearest")),
    "nearest_down": ([2, 3, 9, 11], dict(size=(4, 5), mode="nearest")),
    "bilinear_up": ([2, 3, 5, 7], dict(size=(13, 17), mode="bilinear", align_corners=False)),
    "bilinear_corners_up": ([2, 3, 5, 7], dict(size=(13, 17), mode="bilinear",
                                                align_corners=True)),
    "bilinear_scale": ([2, 3, 5, 7], dict(scale_factor=2.5, mode="bilinear",
                                           align_corners=False)),
    "bilinear_down": ([2, 3, 16, 15], dict(size=(5, 6), mode="bilinear", align_corners=False)),
    "bilinear_corners_down": ([2, 3, 16, 15], dict(size=(5, 6), mode="bilinear",
                                                    align_corners=True)),
    "bilinear_segmentation": ([2, 4, 8, 8], dict(size=(64, 64), mode="bilinear",
                                                  align_corners=False)),
}

# case name -> (x's shape, nn.ConvTranspose2d's arguments).
CONV_TRANSPOSE = {
    "conv_transpose_stride2": ([2, 6, 7, 7], dict(in_channels=6, out_channels=4, kernel_size=3,
                                                  stride=2, padding=1, output_padding=1)),
    "conv_transpose_grouped_dilated": ([2, 6, 5, 6], dict(
        in_channels=6, out_channels=9, kernel_size=(3, 2), stride=(2, 3), padding=(2, 1),
        output_padding=(1, 2), dilation=(2, 1), groups=3)),
    "conv_transpose_fcn_nobias": ([2, 4, 6, 6], dict(in_channels=4, out_channels=4,
                                                     kernel_size=4, stride=2, padding=1,
                                                     bias=False)),
}


def write(path, arrays):
    with open(path, "wb") as f:
        for t in arrays:
            f.write(t.detach().contiguous().numpy().astype("<f4").tobytes())


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    for case, (shape, kwargs) in RESIZE.items():
        x = (torch.rand(shape, generator=g) * 2 - 1).requires_grad_(True)
        y = F.interpolate(x, **kwargs)
        dy = torch.rand(y.shape, generator=g) + 0.5
        y.backward(dy)
        write(os.path.join(args.out, case + ".bin"), [x, dy, y, x.grad])
    for case, (shape, kwargs) in CONV_TRANSPOSE.items():
        m = torch.nn.ConvTranspose2d(**kwargs)
        with torch.no_grad():
            m.weight.copy_(torch.rand(m.weight.shape, generator=g) * 2 - 1)
            if m.bias is not None:
                m.bias.copy_(torch.rand(m.bias.shape, generator=g) * 2 - 1)
        x = (torch.rand(shape, generator=g) * 2 - 1).requires_grad_(True)
        y = m(x)
        dy = torch.rand(y.shape, generator=g) + 0.5
        y.backward(dy)
        params = [m.weight] + ([m.bias] if m.bias is not None else [])
        grads = [m.weight.grad] + ([m.bias.grad] if m.bias is not None else [])
        write(os.path.join(args.out, case + ".bin"), [x] + params + [dy, y, x.grad] + grads)


if __name__ == "__main__":
    main()
