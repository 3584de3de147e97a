#!/usr/bin/env bash
# Runs the libFuzzer targets (built by Bazel with clang, -fsanitize=fuzzer,address,undefined:
# fuzz/libfuzzer.bzl): replays each one's regression inputs, then fuzzes it from its
# checked-in seed corpus. Fails on any crash, sanitizer report, leak or hang, leaving the
# input under $TEST_UNDECLARED_OUTPUTS_DIR; prints each target's executions and coverage.
#
# As a test it runs a fixed number of inputs from a fixed seed, so it is the same run every
# time; for a long hunt set FUZZ_SECONDS (seconds per target, random seed):
#   bazel test //fuzz:fuzz_test --test_env=FUZZ_SECONDS=600 --test_timeout=3600
set -euo pipefail

FUZZ_SECONDS="${FUZZ_SECONDS:-}"
RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
WORK="${TEST_TMPDIR:?}/fuzz"
OUT="${TEST_UNDECLARED_OUTPUTS_DIR:-$WORK/out}"
mkdir -p "$WORK" "$OUT"
cd "$RUNFILES"

# Runs target $1: its regressions once each, then $2 inputs (or FUZZ_SECONDS of fuzzing).
fuzz() {
  local name=$1 fuzzer="$RUNFILES/fuzz/$1" corpus="$WORK/corpus/$1"
  mkdir -p "$corpus"
  cp fuzz/corpus/"$name"/* "$corpus"/
  if compgen -G "fuzz/regressions/$name/*" >/dev/null; then
    "$fuzzer" -runs=0 fuzz/regressions/"$name"/* >"$WORK/$name.regressions.log" 2>&1 ||
      { tail -n 40 "$WORK/$name.regressions.log"; echo "FAIL: $name regression" >&2; exit 1; }
    echo "ok $name: $(ls fuzz/regressions/"$name" | wc -l) regression input(s) replayed"
  fi
  local budget=(-seed=1 -runs="$2")
  [[ -n "$FUZZ_SECONDS" ]] && budget=(-max_total_time="$FUZZ_SECONDS")
  local rc=0
  (cd "$OUT" && "$fuzzer" "${budget[@]}" -rss_limit_mb=2048 -timeout=10 \
     -print_final_stats=1 "$corpus") >"$WORK/$name.log" 2>&1 || rc=$?
  if ((rc != 0)); then
    grep -E 'ERROR|SUMMARY|runtime error|service_request_fuzzer:' "$WORK/$name.log" | head -n 20
    echo "FAIL: $name crashed; the input is under $OUT" >&2
    exit 1
  fi
  local done_line
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$WORK/$name.log" | tail -n 1 || true)
  echo "ok $name: ${done_line:-no DONE line} ($(ls "$corpus" | wc -l) corpus inputs)"
}

# About ten seconds each on this machine.
fuzz graph_loader_fuzzer 200000
fuzz onnx_import_fuzzer 60000
# About a minute: each input is a call answered by an in-process daemon (50 to 80 a second).
fuzz service_request_fuzzer 3000
echo PASS
