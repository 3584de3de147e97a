#!/usr/bin/env bash
# Runs figures_test.py (figures.py on a fabricated GPU run) with Debian's interpreter.
set -euo pipefail
RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
export PYTHONDONTWRITEBYTECODE=1
exec /usr/bin/python3 "$RUNFILES/tools/gpu/figures_test.py"
