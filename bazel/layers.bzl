"""Headroom's layers, lowest first: a package may depend only on its own layer and those
before it (docs/architecture.md). Each layer's BUILD files make their targets visible to
their own layer and the ones after it, so a dependency that points back up, a cycle, fails
the build."""

LAYERS = [
    "util",
    "proto",
    "data",
    "graph",
    "planner",
    "profiler",
    "executor",
    "dist",
    "runner",
    "server",
    "clients",
]

# Folders outside the stack that may use any layer: fuzzers, end-to-end tests, scripts and
# their tests, dashboards.
_USERS = [
    "//fuzz:__subpackages__",
    "//tests:__subpackages__",
    "//tools:__subpackages__",
    "//dashboards:__subpackages__",
]

def layer_visibility(layer):
    """Returns the visibility of `layer`'s targets: its own layer and every later one."""
    if layer not in LAYERS:
        fail("unknown layer %s; add it to LAYERS in //bazel:layers.bzl" % layer)
    index = LAYERS.index(layer)
    return ["//%s:__subpackages__" % name for name in LAYERS[index:]] + _USERS
