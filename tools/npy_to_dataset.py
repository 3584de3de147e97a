#!/usr/bin/python3
"""Converts NumPy arrays of images and labels into a Headroom dataset directory.

    npy_to_dataset.py IMAGES.npy LABELS.npy OUT_DIR [--classes N] [--shard-items K]

IMAGES: [N, H, W] or [N, C, H, W], uint8 (read by training as byte / 255) or float32 (read as
they are). LABELS: [N] integers in [0, classes). OUT_DIR gets index.txt and gzip-compressed
IDX shards of at most K items each (docs/data.md), which `ImageDataset::LoadDirectory`
reads. Every bad array is an error naming the file and what is wrong; nothing is written
then.
"""
import argparse
import gzip
import os
import struct
import sys

import numpy as np

IDX_TYPES = {np.dtype(np.uint8): 0x08, np.dtype(np.float32): 0x0D}


def idx_bytes(array):
    """The IDX encoding of `array`: magic, big-endian dims, big-endian elements."""
    header = struct.pack(">BBBB", 0, 0, IDX_TYPES[array.dtype], array.ndim)
    header += struct.pack(">" + "I" * array.ndim, *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def check(images, labels, classes, images_path, labels_path):
    """Returns an error message, or None where the arrays make a dataset."""
    if images.dtype not in IDX_TYPES:
        return f"{images_path}: dtype {images.dtype}; needs uint8 or float32"
    if images.ndim not in (3, 4) or 0 in images.shape:
        return f"{images_path}: shape {list(images.shape)}; needs [N, H, W] or [N, C, H, W]"
    if images.dtype == np.float32 and not np.isfinite(images).all():
        return f"{images_path}: holds a NaN or an infinity"
    if labels.ndim != 1 or not np.issubdtype(labels.dtype, np.integer):
        return f"{labels_path}: shape {list(labels.shape)} of {labels.dtype}; needs [N] integers"
    if len(labels) != len(images):
        return f"{labels_path}: {len(labels)} labels for {len(images)} images"
    if not 2 <= classes <= 256:
        return f"--classes {classes}: needs 2 to 256"
    bad = np.flatnonzero((labels < 0) | (labels >= classes))
    if bad.size:
        return f"{labels_path}: item {bad[0]} has label {labels[bad[0]]}, outside [0, {classes})"
    return None


def convert(images_path, labels_path, out_dir, classes=None, shard_items=10000):
    images = np.load(images_path, allow_pickle=False)
    labels = np.load(labels_path, allow_pickle=False)
    if classes is None:
        classes = int(labels.max()) + 1 if labels.size else 0
    error = check(images, labels, classes, images_path, labels_path)
    if error:
        raise ValueError(error)
    if shard_items < 1:
        raise ValueError(f"--shard-items {shard_items}: needs at least 1")
    os.makedirs(out_dir, exist_ok=True)
    lines = ["headroom-dataset 1", f"classes {classes}"]
    for shard, start in enumerate(range(0, len(images), shard_items)):
        names = (f"{shard:05d}.images.idx.gz", f"{shard:05d}.labels.idx.gz")
        parts = (images[start:start + shard_items], labels[start:start + shard_items].astype(np.uint8))
        for name, part in zip(names, parts):
            with gzip.open(os.path.join(out_dir, name), "wb") as f:
                f.write(idx_bytes(np.ascontiguousarray(part)))
        lines.append(f"shard {names[0]} {names[1]}")
    with open(os.path.join(out_dir, "index.txt"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return len(lines) - 2


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("images")
    parser.add_argument("labels")
    parser.add_argument("out_dir")
    parser.add_argument("--classes", type=int, help="class count (default: largest label + 1)")
    parser.add_argument("--shard-items", type=int, default=10000, help="items per shard")
    args = parser.parse_args()
    try:
        shards = convert(args.images, args.labels, args.out_dir, args.classes, args.shard_items)
    except (ValueError, OSError) as e:
        print(f"npy_to_dataset: {e}", file=sys.stderr)
        return 1
    print(f"wrote {shards} shard(s) to {args.out_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
