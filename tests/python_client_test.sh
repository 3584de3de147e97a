#!/usr/bin/env bash
# The Python client (clients/python/headroom_client) against a real headroomd on free
# loopback ports: tests/python_client_test.py (plan, submit, watch/wait, jobs, timeline,
# errors, a PyTorch module planned and trained as a GraphDef), then the shipped example
# clients/python/examples/submit_and_watch.py, which must exit 0. Both run on Debian's
# /usr/bin/python3 (grpcio, protobuf, torch) with the package importable from the runfiles
# tree, as clients/python/python_test.sh sets it up. headroomd must exit 0 on SIGTERM.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
HEADROOMD="$RUNFILES/server/headroomd"
SCRIPT="$RUNFILES/tests/python_client_test.py"
# The shipped example, a data dependency (//clients/python:examples).
EXAMPLE="$RUNFILES/clients/python/examples/submit_and_watch.py"
PYTHON=/usr/bin/python3
TMP="${TEST_TMPDIR:?}"

export PYTHONPATH="$RUNFILES/clients/python"
export PYTHONDONTWRITEBYTECODE=1

if [[ ! -f "$EXAMPLE" ]]; then
  echo "FAIL: examples/submit_and_watch.py is not in the runfiles ($EXAMPLE)" >&2
  exit 1
fi
if ! "$PYTHON" -c "import grpc, google.protobuf, torch" 2>/dev/null; then
  echo "FAIL: $PYTHON cannot import grpc, protobuf and torch; install python3-grpcio," \
    "python3-protobuf and python3-torch (./headroom test does)" >&2
  exit 1
fi

# shellcheck source=tests/headroomd_test_lib.sh
source "$RUNFILES/tests/headroomd_test_lib.sh"

start=$SECONDS
start_headroomd
echo "headroomd: $ADDR"

cd "$RUNFILES"
"$PYTHON" "$SCRIPT" --server "$ADDR" || fail "python_client_test.py failed"

echo "== examples/submit_and_watch.py"
set +e
"$PYTHON" "$EXAMPLE" --server "$ADDR" --model mlp --batch 8 --budget 48MiB --steps 5 \
  >"$TMP/example.txt" 2>&1
example_rc=$?
set -e
cat "$TMP/example.txt"
((example_rc == 0)) || fail "submit_and_watch.py exited $example_rc"
check_example "$TMP/example.txt"
stop_headroomd
echo "PASS ($((SECONDS - start)) s)"
