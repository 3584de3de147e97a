#!/usr/bin/env bash
# Runs a Python test of the client with Debian's interpreter (which has grpcio, protobuf and
# PyTorch) and the package importable from the runfiles tree, where the sources and the
# generated stubs (headroom_client/_proto) meet under clients/python.
#
#   python_test.sh SCRIPT [ARGS...]    SCRIPT (and any path in ARGS) relative to the workspace
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
PYTHON=/usr/bin/python3
script="$1"
shift
export PYTHONPATH="$RUNFILES/clients/python"
export PYTHONDONTWRITEBYTECODE=1
cd "$RUNFILES"
exec "$PYTHON" "$RUNFILES/$script" "$@"
