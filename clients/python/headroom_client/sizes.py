"""Byte sizes as people write them ("400MiB", "1.5GB") and back."""

import re

_SIZE = re.compile(r"^\s*([0-9]*\.?[0-9]+|[0-9]+\.)\s*([A-Za-z]*)\s*$")
_PREFIXES = "kmgt"
_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def parse_bytes(size):
    """Returns the bytes `size` means: an int as is, or a string like "4096", "512MiB",
    "6GiB", "1.5GB" or "64k". K/M/G/T and KiB/MiB/GiB/TiB are powers of 1024, KB/MB/GB/TB
    powers of 1000, as the headroom CLI reads them. Raises ValueError otherwise."""
    if isinstance(size, int) and not isinstance(size, bool):
        if size < 0:
            raise ValueError(f"{size} is not a byte size (negative)")
        return size
    match = _SIZE.match(size) if isinstance(size, str) else None
    if not match:
        raise ValueError(f"{size!r} is not a byte size; write e.g. 6GiB, 512MiB, 1.5GB or 4096")
    number, unit = float(match.group(1)), match.group(2).lower()
    if unit in ("", "b"):
        scale = 1
    elif unit[0] in _PREFIXES and unit[1:] in ("", "b", "ib"):
        scale = (1000 if unit[1:] == "b" else 1024) ** (_PREFIXES.index(unit[0]) + 1)
    else:
        raise ValueError(f"{size!r} is not a byte size (unknown unit '{match.group(2)}'); "
                         "write e.g. 6GiB, 512MiB, 1.5GB or 4096")
    num_bytes = round(number * scale)
    if num_bytes >= 2**64:
        raise ValueError(f"{size!r} is not a byte size (more than 2^64 - 1 bytes)")
    return num_bytes


def format_bytes(num_bytes):
    """Returns `num_bytes` for people: "512 B", "1.50 KiB", "2.00 GiB"."""
    value = float(num_bytes)
    for unit in _UNITS:
        if value < 1024 or unit == _UNITS[-1]:
            return f"{int(value)} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
