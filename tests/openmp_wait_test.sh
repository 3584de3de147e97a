#!/usr/bin/env bash
# headroom and headroomd run with passively waiting OpenMP threads unless the environment
# chooses otherwise: read from the running processes' own /proc/PID/environ (what libgomp
# saw when it loaded), not from anything the programs print.
set -euo pipefail

HEADROOM="$TEST_SRCDIR/headroom/clients/headroom"
HEADROOMD="$TEST_SRCDIR/headroom/server/headroomd"
TMP="${TEST_TMPDIR:?}"

fail() { echo "FAIL: $*" >&2; exit 1; }

# Prints the value of $2 in the environment of process $1 ("" when unset), waiting for the
# process to have re-run itself (its command line settled) for up to 10 s.
env_of() {
  local pid=$1 name=$2 i
  for i in $(seq 100); do
    if [[ -r /proc/$pid/environ ]] && tr '\0' '\n' </proc/$pid/environ | grep -q "^$name="; then
      break
    fi
    sleep 0.1
  done
  tr '\0' '\n' </proc/$pid/environ 2>/dev/null | sed -n "s/^$name=//p" | head -n 1
}


# 1. Nothing chosen: PASSIVE, in the process that trains (same pid: exec replaces it).
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$HEADROOM" train --model mlp --batch 256 --steps 400 \
  >/dev/null 2>&1 &
pid=$!
got=$(env_of $pid OMP_WAIT_POLICY)
kill $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
[[ "$got" == PASSIVE ]] || fail "headroom train ran with OMP_WAIT_POLICY='$got', not PASSIVE"
echo "ok headroom train: OMP_WAIT_POLICY=$got"

# 2. The user's choice stands.
OMP_WAIT_POLICY=ACTIVE "$HEADROOM" train --model mlp --batch 256 --steps 400 >/dev/null 2>&1 &
pid=$!
got=$(env_of $pid OMP_WAIT_POLICY)
kill $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
[[ "$got" == ACTIVE ]] || fail "OMP_WAIT_POLICY=ACTIVE became '$got'"
echo "ok headroom train keeps OMP_WAIT_POLICY=ACTIVE"
env -u OMP_WAIT_POLICY GOMP_SPINCOUNT=1000 "$HEADROOM" train --model mlp --batch 256 \
  --steps 400 >"$TMP/spincount.out" 2>&1 &
pid=$!
# Its first step line proves main() runs past any re-run of itself; then read its environment.
for _ in $(seq 300); do
  grep -q ' 1/400 ' "$TMP/spincount.out" 2>/dev/null && break
  kill -0 $pid 2>/dev/null || break
  sleep 0.1
done
grep -q ' 1/400 ' "$TMP/spincount.out" || fail "headroom train printed no step: $(cat "$TMP/spincount.out")"
got=$(tr '\0' '\n' </proc/$pid/environ | sed -n 's/^OMP_WAIT_POLICY=//p')
kill $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
[[ -z "$got" ]] || fail "GOMP_SPINCOUNT given, yet OMP_WAIT_POLICY='$got' was set"
echo "ok GOMP_SPINCOUNT chosen: OMP_WAIT_POLICY left unset"

# 3. The daemon too.
env -u OMP_WAIT_POLICY -u GOMP_SPINCOUNT "$HEADROOMD" --listen 127.0.0.1:0 --metrics off \
  --state "$TMP/state" --fixed-cost 0 --ready-file "$TMP/ready" >"$TMP/headroomd.log" 2>&1 &
pid=$!
got=$(env_of $pid OMP_WAIT_POLICY)
kill -TERM $pid 2>/dev/null || true
wait $pid 2>/dev/null || true
[[ "$got" == PASSIVE ]] || fail "headroomd ran with OMP_WAIT_POLICY='$got', not PASSIVE"
echo "ok headroomd: OMP_WAIT_POLICY=$got"
echo "PASS"
