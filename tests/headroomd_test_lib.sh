# Shared by the shell tests that run a real headroomd and the Python example against it.
# Source it after setting TMP (a scratch folder) and HEADROOMD (the binary):
#   fail MESSAGE...             print, with the tail of headroomd's log, and exit 1
#   start_headroomd [FLAGS...]  headroomd on free loopback ports with 64 MiB of device
#                               memory and one OpenMP thread; sets DAEMON_PID and ADDR; the
#                               daemon is killed when the test exits
#   stop_headroomd              SIGTERM; fails unless headroomd exits 0
#   expect_refused WANT ARGS... `headroom submit --server $ADDR ARGS...` fails saying WANT
#                               (needs HEADROOM, the client)
#   check_example FILE          the output of examples/submit_and_watch.py (mlp, batch 8,
#                               5 steps) shows its plan, its job succeeding and the peak

DAEMON_PID=""
stop_headroomd_on_exit() {
  if [[ -n "$DAEMON_PID" ]] && kill -0 "$DAEMON_PID" 2>/dev/null; then
    kill -TERM "$DAEMON_PID" 2>/dev/null || true
    sleep 1
    kill -KILL "$DAEMON_PID" 2>/dev/null || true
  fi
}
trap stop_headroomd_on_exit EXIT

fail() {
  echo "FAIL: $*" >&2
  if [[ -s "$TMP/headroomd.log" ]]; then
    echo "--- last lines of headroomd's log" >&2
    tail -n 20 "$TMP/headroomd.log" >&2
  fi
  exit 1
}

start_headroomd() {
  mkdir -p "$TMP/state"
  # A restarted daemon must not be found at the address its predecessor wrote.
  rm -f "$TMP/ready"
  # One OpenMP thread: oneDNN's threads spin-wait, which on a busy two-core machine makes
  # steps far slower than one thread's.
  OMP_NUM_THREADS=1 "$HEADROOMD" --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
    --state "$TMP/state" --device-memory 64MiB --ready-file "$TMP/ready" "$@" \
    >"$TMP/headroomd.log" 2>&1 &
  DAEMON_PID=$!
  for _ in $(seq 600); do
    grep -qs '^metrics=' "$TMP/ready" && break
    kill -0 "$DAEMON_PID" 2>/dev/null || fail "headroomd exited before it was ready"
    sleep 0.1
  done
  [[ -s "$TMP/ready" ]] || fail "headroomd wrote no ready file in 60 s"
  ADDR=$(sed -n 's/^grpc=//p' "$TMP/ready")
  [[ "$ADDR" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "bad grpc address '$ADDR'"
}

check_example() {
  grep -q "^plan: mlp batch 8" "$1" || fail "the example printed no plan"
  grep -q "JOB_STATE_SUCCEEDED *step 5/5" "$1" ||
    fail "the example did not follow its job to step 5/5, succeeded"
  grep -q "^timeline peak: " "$1" || fail "the example printed no timeline peak"
}

# Stops headroomd with SIGTERM; fails unless it exits 0.
stop_headroomd() {
  kill -TERM "$DAEMON_PID"
  local rc=0
  wait "$DAEMON_PID" || rc=$?
  DAEMON_PID=""
  ((rc == 0)) || fail "headroomd exited $rc on SIGTERM"
}

# Fails unless `headroom submit --server $ADDR "${@:2}"` fails with output containing $1.
expect_refused() {
  local want="$1"
  shift
  local out rc=0
  out=$("$HEADROOM" submit --server "$ADDR" "$@" 2>&1) || rc=$?
  ((rc != 0)) || fail "'submit $*' succeeded; wanted an error with '$want'"
  [[ "$out" == *"$want"* ]] || fail "'submit $*' said: $out; wanted '$want'"
  echo "ok   refused: ${out:0:200}"
}
