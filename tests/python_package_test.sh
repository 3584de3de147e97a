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

# shellcheck source=tests/headroomd_test_lib.sh
source "$RUNFILES/tests/headroomd_test_lib.sh"

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
start_headroomd

echo "== submit_and_watch.py with the venv's python"
rc=0
"$VENV/bin/python" submit_and_watch.py --server "$ADDR" --model mlp --batch 8 --budget 48MiB \
  --steps 5 >"$TMP/example.txt" 2>&1 || rc=$?
cat "$TMP/example.txt"
((rc == 0)) || fail "submit_and_watch.py exited $rc"
check_example "$TMP/example.txt"
stop_headroomd
echo PASS
