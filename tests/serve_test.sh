#!/usr/bin/env bash
# `./headroom serve` with the built headroomd (HEADROOMD_BIN, so nothing is built or
# installed) in a temporary HOME: it announces where it listens once ready, the announced
# gRPC address answers `headroom jobs` and the metrics URL answers, the state lands where the
# defaults say, and SIGTERM and SIGINT (Ctrl-C) stop it with exit 0.
#   1. XDG_STATE_HOME set, --listen on a chosen free port: state in $XDG_STATE_HOME/headroom.
#   2. XDG_STATE_HOME unset: state in $HOME/.local/state/headroom; stopped with SIGINT.
#   3. --state=DIR given: the daemon uses DIR, and the default directory is not created.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
WRAPPER="$RUNFILES/headroom"
export HEADROOMD_BIN="$RUNFILES/server/headroomd"
CLI="$RUNFILES/clients/headroom"
TMP="${TEST_TMPDIR:?}"
# headroomd measures its fixed cost with a small training run at start unless given one.
FAST=(--fixed-cost 0)

SERVE_PID=""
LOG=""
cleanup() {
  if [[ -n "$SERVE_PID" ]] && kill -0 "$SERVE_PID" 2>/dev/null; then
    kill -KILL "$SERVE_PID" 2>/dev/null || true
  fi
}
trap cleanup EXIT

fail() {
  echo "FAIL: $*" >&2
  if [[ -n "$LOG" && -s "$LOG" ]]; then
    echo "--- output of ./headroom serve" >&2
    cat "$LOG" >&2
  fi
  exit 1
}

# Prints a TCP port free on loopback now.
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

# Starts `env ENV_ARGS... ./headroom serve SERVE_ARGS...` from a directory outside the
# repository, with SIGINT at its default action (a background job of a script would otherwise
# ignore it, as Ctrl-C's target in a terminal does not), output to $LOG; sets SERVE_PID.
# Usage: start_serve NAME [ENV_ARG...] -- [SERVE_ARG...]
start_serve() {
  LOG="$TMP/serve.$1.log"
  shift
  local env_args=()
  while [[ "$1" != -- ]]; do
    env_args+=("$1")
    shift
  done
  shift
  (cd "$TMP" && exec env ${env_args[@]+"${env_args[@]}"} /usr/bin/python3 -c \
    'import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); os.execv(sys.argv[1], sys.argv[1:])' \
    "$WRAPPER" serve "$@") >"$LOG" 2>&1 &
  SERVE_PID=$!
}

# Waits for the "listening" announcement; sets GRPC, METRICS and STATE from it.
wait_listening() {
  for _ in $(seq 600); do
    grep -q '^  state ' "$LOG" && break
    kill -0 "$SERVE_PID" 2>/dev/null || fail "./headroom serve exited before it was ready"
    sleep 0.1
  done
  grep -q '^headroom: headroomd is listening on ' "$LOG" || fail "no 'listening' line in 60 s"
  GRPC="$(sed -n 's/^  gRPC *//p' "$LOG")"
  METRICS="$(sed -n 's/^  metrics *//p' "$LOG")"
  STATE="$(sed -n 's/^  state *//p' "$LOG")"
  [[ "$(sed -n 's/^headroom: headroomd is listening on //p' "$LOG")" == "$GRPC" ]] ||
    fail "the listening line and the gRPC line disagree"
  [[ "$GRPC" =~ ^127\.0\.0\.1:[1-9][0-9]*$ ]] || fail "gRPC address '$GRPC' is not on loopback"
  [[ "$METRICS" =~ ^http://127\.0\.0\.1:[1-9][0-9]*/metrics$ ]] ||
    fail "metrics URL '$METRICS' is not on loopback"
  # The ready file's temporary directory is gone once the addresses are printed.
  [[ -z "$(ls -A "$TMPDIR")" ]] || fail "left behind in \$TMPDIR: $(ls -A "$TMPDIR")"
}

# The daemon answers at the announced addresses.
check_answers() {
  local out
  out="$("$CLI" jobs --server "$GRPC")" || fail "headroom jobs --server $GRPC failed"
  [[ "$out" == "no jobs" ]] || fail "headroom jobs printed '$out', expected 'no jobs'"
  curl -sf "$METRICS" | grep -q '^headroom_' || fail "$METRICS serves no headroom_ metrics"
}

# Sends SIGNAL to the daemon and expects exit 0 and its "stopped" line.
stop_with() {
  local signal="$1" rc=0
  kill "-$signal" "$SERVE_PID"
  wait "$SERVE_PID" || rc=$?
  SERVE_PID=""
  ((rc == 0)) || fail "exited $rc on SIG$signal"
  grep -q "^headroomd: SIG$signal: stopping" "$LOG" || fail "no 'SIG$signal: stopping' line"
  grep -q '^headroomd: stopped$' "$LOG" || fail "no 'stopped' line"
}

mkdir -p "$TMP/home" "$TMP/tmp"
export HOME="$TMP/home" TMPDIR="$TMP/tmp"

echo "== 1. XDG_STATE_HOME, --listen on a free port, SIGTERM"
port="$(free_port)"
start_serve xdg XDG_STATE_HOME="$TMP/xdg-state" -- --listen "127.0.0.1:$port" --metrics 127.0.0.1:0 "${FAST[@]}"
wait_listening
[[ "$GRPC" == "127.0.0.1:$port" ]] || fail "listening on $GRPC, not the --listen given (127.0.0.1:$port)"
[[ "$STATE" == "$TMP/xdg-state/headroom" ]] || fail "state '$STATE', expected \$XDG_STATE_HOME/headroom"
[[ -f "$STATE/headroom.db" ]] || fail "no headroom.db in $STATE"
check_answers
stop_with TERM
[[ ! -e "$HOME/.local/state/headroom" ]] || fail "$HOME/.local/state/headroom created though XDG_STATE_HOME was set"

echo "== 2. no XDG_STATE_HOME, SIGINT"
start_serve home -u XDG_STATE_HOME -- --listen 127.0.0.1:0 --metrics 127.0.0.1:0 "${FAST[@]}"
wait_listening
[[ "$STATE" == "$HOME/.local/state/headroom" ]] || fail "state '$STATE', expected \$HOME/.local/state/headroom"
[[ -f "$STATE/headroom.db" ]] || fail "no headroom.db in $STATE"
check_answers
stop_with INT

echo "== 3. --state=DIR given"
rm -rf "$HOME/.local/state"
start_serve given XDG_STATE_HOME="$TMP/xdg-unused" -- --listen 127.0.0.1:0 --metrics 127.0.0.1:0 \
  --state="$TMP/given" "${FAST[@]}"
wait_listening
[[ "$STATE" == "$TMP/given" ]] || fail "state '$STATE', expected the --state given"
[[ -f "$TMP/given/headroom.db" ]] || fail "no headroom.db in the --state given"
[[ ! -e "$TMP/xdg-unused/headroom" ]] || fail "the default state dir was created beside --state"
stop_with TERM

echo PASS
