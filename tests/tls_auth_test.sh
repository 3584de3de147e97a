#!/usr/bin/env bash
# headroomd with --tls-cert, --tls-key and --token-file, with a CA and a server certificate
# for 127.0.0.1 and localhost made here by openssl: `headroom jobs` and the Python client
# (tests/tls_auth_test.py) get UNAUTHENTICATED without a token and with a wrong one (the
# token not repeated), UNAVAILABLE in plaintext and trusting another CA, and the jobs with
# the right CA and token (--token-file, and HEADROOM_TOKEN); a job submitted with alice's
# token is not listed, watched, cancelled or read by bob's. headroomd refuses --token-file
# without TLS (exit 2) and exits 0 on SIGTERM. The ready file is a FIFO: reading it waits for
# the daemon with a deadline, with no polling.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
HEADROOMD="$RUNFILES/server/headroomd"
HEADROOM="$RUNFILES/clients/headroom"
SCRIPT="$RUNFILES/tests/tls_auth_test.py"
TMP="${TEST_TMPDIR:?}"
OPENSSL=/usr/bin/openssl
export PYTHONPATH="$RUNFILES/clients/python"
export PYTHONDONTWRITEBYTECODE=1
unset HEADROOM_TOKEN

DAEMON_PID=""
cleanup() {
  if [[ -n "$DAEMON_PID" ]]; then kill -KILL "$DAEMON_PID" 2>/dev/null || true; fi
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  [[ -s "$TMP/headroomd.log" ]] && tail -n 20 "$TMP/headroomd.log" >&2
  exit 1
}

# make_ca NAME: NAME.key and the self-signed NAME.pem.
make_ca() {
  "$OPENSSL" req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 1 \
    -subj "/CN=headroom test $1" -keyout "$TMP/$1.key" -out "$TMP/$1.pem" 2>/dev/null
}
make_ca ca
make_ca other-ca
"$OPENSSL" req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=localhost \
  -keyout "$TMP/server.key" -out "$TMP/server.csr" 2>/dev/null
printf 'subjectAltName=IP:127.0.0.1,DNS:localhost\nextendedKeyUsage=serverAuth\n' >"$TMP/ext"
"$OPENSSL" x509 -req -in "$TMP/server.csr" -CA "$TMP/ca.pem" -CAkey "$TMP/ca.key" \
  -CAcreateserial -days 1 -extfile "$TMP/ext" -out "$TMP/server.pem" 2>/dev/null

TOKEN="tok-$RANDOM$RANDOM-alice"
printf '# test tokens\n%s alice\ntok-bob-2 bob\n' "$TOKEN" >"$TMP/tokens"
echo "not-$TOKEN" >"$TMP/wrong-token"
echo "$TOKEN" >"$TMP/right-token"

# Tokens need TLS.
set +e
"$HEADROOMD" --listen 127.0.0.1:0 --metrics off --state "$TMP/state0" \
  --token-file "$TMP/tokens" >"$TMP/plain.log" 2>&1
rc=$?
set -e
((rc == 2)) || fail "headroomd --token-file without TLS exited $rc, not 2"
grep -q -- "--token-file needs --tls-cert" "$TMP/plain.log" || fail "no reason: $(cat "$TMP/plain.log")"

mkfifo "$TMP/ready"
OMP_NUM_THREADS=1 "$HEADROOMD" --listen 127.0.0.1:0 --metrics off --state "$TMP/state" \
  --device-memory 64MiB --fixed-cost 1MiB --ready-file "$TMP/ready" \
  --tls-cert "$TMP/server.pem" --tls-key "$TMP/server.key" --token-file "$TMP/tokens" \
  >"$TMP/headroomd.log" 2>&1 &
DAEMON_PID=$!
READY=$(timeout 60 cat "$TMP/ready") || fail "headroomd was not ready in 60 s"
ADDR=$(sed -n 's/^grpc=//p' <<<"$READY")
[[ "$ADDR" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "bad grpc address '$ADDR'"
echo "headroomd: TLS and tokens on $ADDR"

# expect_cli RC PATTERN WHAT ARGS...: `headroom ARGS...` exits RC with PATTERN in its output.
expect_cli() {
  local want_rc=$1 pattern=$2 what=$3 rc=0
  shift 3
  "$HEADROOM" "$@" >"$TMP/cli.txt" 2>&1 || rc=$?
  ((rc == want_rc)) || fail "$what: exit $rc, not $want_rc: $(cat "$TMP/cli.txt")"
  grep -q -- "$pattern" "$TMP/cli.txt" || fail "$what: no '$pattern' in: $(cat "$TMP/cli.txt")"
  if grep -q -- "not-$TOKEN" "$TMP/cli.txt"; then fail "$what: the token is repeated"; fi
  echo "ok: $what: $(head -n 1 "$TMP/cli.txt")"
}
CA=(--server "$ADDR" --tls-ca "$TMP/ca.pem")
expect_cli 1 "UNAUTHENTICATED: this headroomd needs a token" "no token" jobs "${CA[@]}"
expect_cli 1 "UNAUTHENTICATED: the token sent is not one" "wrong token" \
  jobs "${CA[@]}" --token-file "$TMP/wrong-token"
expect_cli 1 "UNAVAILABLE" "plaintext against TLS" jobs --server "$ADDR"
expect_cli 1 "UNAVAILABLE" "another CA" \
  jobs --server "$ADDR" --tls-ca "$TMP/other-ca.pem" --token-file "$TMP/right-token"
expect_cli 2 "--token-file needs --tls-ca" "a token without TLS" \
  jobs --server "$ADDR" --token-file "$TMP/right-token"
expect_cli 0 "" "the right CA and token" jobs "${CA[@]}" --token-file "$TMP/right-token"
expect_cli 0 "arena" "a plan with the right CA and token" \
  plan "${CA[@]}" --token-file "$TMP/right-token" --model mlp
expect_cli 0 "" "the daemon's own token file" jobs "${CA[@]}" --token-file "$TMP/tokens"
HEADROOM_TOKEN="$TOKEN" expect_cli 0 "" "HEADROOM_TOKEN" jobs "${CA[@]}"
HEADROOM_TOKEN="$TOKEN" expect_cli 0 "" "localhost" \
  jobs --server "localhost:${ADDR##*:}" --tls-ca "$TMP/ca.pem"

# Jobs are their owners': alice's job is NOT_FOUND for bob, as if absent, and alice's to see.
echo "tok-bob-2" >"$TMP/bob-token"
BOB=("${CA[@]}" --token-file "$TMP/bob-token")
ALICE=("${CA[@]}" --token-file "$TMP/right-token")
"$HEADROOM" submit "${ALICE[@]}" --model mlp --batch 8 --steps 2 --json >"$TMP/submit.json" ||
  fail "alice's submit failed"
JOB=$(sed -n 's/.*"job_id": *"\([^"]*\)".*/\1/p' "$TMP/submit.json" | head -n 1)
[[ -n "$JOB" ]] || fail "no job id in $(cat "$TMP/submit.json")"
expect_cli 0 "$JOB" "alice lists her job" jobs "${ALICE[@]}"
"$HEADROOM" jobs "${BOB[@]}" >"$TMP/bob-jobs.txt" 2>&1 || fail "bob's jobs failed"
if grep -q -- "$JOB" "$TMP/bob-jobs.txt"; then fail "bob sees alice's job: $(cat "$TMP/bob-jobs.txt")"; fi
echo "ok: bob does not list alice's job"
expect_cli 1 "NOT_FOUND: no job '$JOB'" "bob cancels alice's job" cancel "${BOB[@]}" "$JOB"
expect_cli 1 "NOT_FOUND: no job '$JOB'" "bob watches alice's job" watch "${BOB[@]}" "$JOB"
expect_cli 1 "NOT_FOUND: no job '$JOB'" "bob reads alice's timeline" timeline "${BOB[@]}" "$JOB"
expect_cli 0 "SUCCEEDED" "alice watches her job to its end" watch "${ALICE[@]}" "$JOB"

/usr/bin/python3 "$SCRIPT" --server "$ADDR" --ca "$TMP/ca.pem" --other-ca "$TMP/other-ca.pem" \
  --token "$TOKEN" || fail "tls_auth_test.py failed"

kill -TERM "$DAEMON_PID"
rc=0
wait "$DAEMON_PID" || rc=$?
DAEMON_PID=""
((rc == 0)) || fail "headroomd exited $rc on SIGTERM"
echo PASS
