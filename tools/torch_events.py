"""Reading torch.profiler's event tree: what tools/torch_reference.py and
bench/pytorch_peak.py share when they attribute CPU allocations to ops.
"""

# Ops that only allocate on behalf of the op that called them.
ALLOCATION_HELPERS = frozenset({
    "aten::empty", "aten::empty_like", "aten::empty_strided", "aten::zeros",
    "aten::zeros_like", "aten::new_empty", "aten::new_zeros", "aten::new_empty_strided",
    "aten::resize_", "aten::clone", "aten::contiguous", "aten::to", "aten::_to_copy"})


def WalkEvents(events):
    """Yields every event of the trees rooted at `events`, each before its children."""
    stack = list(events)
    while stack:
        e = stack.pop()
        yield e
        stack.extend(e.children)
