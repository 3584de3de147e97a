#!/usr/bin/env bash
# `pip install ./clients/python` as the README says, offline with Debian's packages: the
# package's sources and proto/headroom.proto are copied (in their repository layout) into
# $TEST_TMPDIR, installed with the venv's pip (--no-build-isolation --no-index) into a fresh
# venv made with --system-site-packages, and then the shipped example
# examples/submit_and_watch.py runs with the venv's python, from a directory outside any
# source tree, against a real headroomd on free loopback ports. Checks that the package
# imported is the installed one, stubs included, that the build left the copied sources
# without stubs (they are generated into the build), and that the example's job succeeds.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
HEADROOMD="$RUNFILES/server/headroomd"
TMP="${TEST_TMPDIR:?}"
SRC="$TMP/src"
VENV="$TMP/venv"
export HOME="$TMP/home" PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
unset PYTHONPATH
mkdir -p "$HOME"

DAEMON_PID=""
cleanup() {
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
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

echo "== copy clients/python and proto/headroom.proto to $SRC"
mkdir -p "$SRC/clients" "$SRC/proto"
cp -rL "$RUNFILES/clients/python" "$SRC/clients/"
cp -L "$RUNFILES/proto/headroom.proto" "$SRC/proto/"
[[ -f "$SRC/clients/python/pyproject.toml" ]] || fail "no pyproject.toml in the runfiles"
[[ ! -e "$SRC/clients/python/headroom_client/_proto" ]] ||
  fail "the copied sources already hold stubs; the test would not show the build makes them"

echo "== venv and pip install"
/usr/bin/python3 -m venv --system-site-packages "$VENV" || fail "python3 -m venv failed (python3-venv)"
"$VENV/bin/python" -m pip install --no-build-isolation --no-index "$SRC/clients/python" \
  >"$TMP/pip.log" 2>&1 || { cat "$TMP/pip.log" >&2; fail "pip install failed"; }
grep -q "Successfully installed headroom-client-" "$TMP/pip.log" ||
  { cat "$TMP/pip.log" >&2; fail "pip did not install headroom-client"; }
[[ ! -e "$SRC/clients/python/headroom_client/_proto" ]] ||
  fail "the build wrote stubs into the source tree"

mkdir -p "$TMP/run"
cp -L "$RUNFILES/clients/python/examples/submit_and_watch.py" "$TMP/run/"
cd "$TMP/run"
site="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
where="$("$VENV/bin/python" -c 'import headroom_client, headroom_client._proto.headroom_pb2_grpc as g
print(headroom_client.__file__); print(g.__file__)')" || fail "the installed package does not import"
echo "$where"
while read -r file; do
  [[ "$file" == "$site/headroom_client/"* ]] || fail "imported $file, not from the venv ($site)"
done <<<"$where"

echo "== headroomd"
mkdir -p "$TMP/state"
OMP_NUM_THREADS=1 "$HEADROOMD" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 --state "$TMP/state" \
  --device-memory 64MiB --ready-file "$TMP/ready" >"$TMP/headroomd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 600); do
  grep -qs '^metrics=' "$TMP/ready" && break
  kill -0 "$DAEMON_PID" 2>/dev/null || fail "headroomd exited before it was ready"
  sleep 0.1
done
ADDR=$(sed -n 's/^grpc=//p' "$TMP/ready")
[[ "$ADDR" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "bad grpc address '$ADDR'"

echo "== submit_and_watch.py with the venv's python"
rc=0
"$VENV/bin/python" submit_and_watch.py --server "$ADDR" --model mlp --batch 8 --budget 48MiB \
  --steps 5 >"$TMP/example.txt" 2>&1 || rc=$?
cat "$TMP/example.txt"
((rc == 0)) || fail "submit_and_watch.py exited $rc"
grep -q "^plan: mlp batch 8" "$TMP/example.txt" || fail "the example printed no plan"
grep -q "JOB_STATE_SUCCEEDED *step 5/5" "$TMP/example.txt" ||
  fail "the example did not follow its job to step 5/5, succeeded"
grep -q "^timeline peak: " "$TMP/example.txt" || fail "the example printed no timeline peak"

kill -TERM "$DAEMON_PID"
wait "$DAEMON_PID" || fail "headroomd exited $? on SIGTERM"
DAEMON_PID=""
echo PASS
