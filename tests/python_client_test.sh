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

DAEMON_PID=""
cleanup() {
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    sleep 1
    kill -KILL "$DAEMON_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  if [[ -s "$TMP/headroomd.log" ]]; then
    echo "--- last lines of headroomd's log" >&2
    tail -n 20 "$TMP/headroomd.log" >&2
  fi
  exit 1
}

start=$SECONDS
mkdir -p "$TMP/state"
# One OpenMP thread: oneDNN's threads spin-wait, which on a busy two-core machine makes steps
# far slower than one thread's.
OMP_NUM_THREADS=1 "$HEADROOMD" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --state "$TMP/state" \
  --device-memory 64MiB --ready-file "$TMP/ready" >"$TMP/headroomd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 600); do
  [[ -s "$TMP/ready" ]] && grep -q '^metrics=' "$TMP/ready" && break
  kill -0 "$DAEMON_PID" 2>/dev/null || fail "headroomd exited before it was ready"
  sleep 0.1
done
[[ -s "$TMP/ready" ]] || fail "headroomd wrote no ready file in 60 s"
ADDR=$(sed -n 's/^grpc=//p' "$TMP/ready")
[[ "$ADDR" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "bad grpc address '$ADDR'"
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
grep -q "^plan: mlp batch 8" "$TMP/example.txt" || fail "the example printed no plan"
grep -q "JOB_STATE_SUCCEEDED *step 5/5" "$TMP/example.txt" ||
  fail "the example did not follow its job to step 5/5, succeeded"
grep -q "^timeline peak: " "$TMP/example.txt" || fail "the example printed no timeline peak"

kill -TERM "$DAEMON_PID"
set +e
wait "$DAEMON_PID"
daemon_rc=$?
set -e
DAEMON_PID=""
((daemon_rc == 0)) || fail "headroomd exited $daemon_rc on SIGTERM"
echo "PASS ($((SECONDS - start)) s)"
