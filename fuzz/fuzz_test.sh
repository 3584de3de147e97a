#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (-fsanitize=fuzzer,address,undefined) from the
# sources they exercise, replays the regression inputs, then fuzzes each target from its
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
mkdir -p "$WORK/obj" "$OUT"
cd "$RUNFILES"

CXX=/usr/bin/clang++
[[ -x "$CXX" ]] || { echo "FAIL: clang++ is missing: ./headroom installs clang" >&2; exit 1; }
# The generated messages sit in the bin tree; the rest in the source tree.
PROTO_H="$(find . -path '*proto/headroom.pb.h' | head -n 1)"
PROTO_DIR="$(dirname "$PROTO_H")"
COMPILE=(-std=c++17 -O1 -g -fsanitize=fuzzer-no-link,address,undefined
         -fno-sanitize-recover=undefined -DONNX_ML=1 -I. -I"$PROTO_DIR/..")
LINK=(-fsanitize=fuzzer,address,undefined -lprotobuf -lonnx_proto
      -labsl_statusor -labsl_status -labsl_str_format_internal -labsl_strings
      -labsl_strings_internal -labsl_int128 -labsl_raw_logging_internal -labsl_throw_delegate
      -labsl_base -labsl_cord -labsl_hash -labsl_raw_hash_set -labsl_synchronization
      -labsl_time -labsl_time_zone)
LOADER=(graph/graph.cc graph/op_registry.cc graph/op_set.cc graph/shape.cc
        "$PROTO_DIR/headroom.pb.cc")
ONNX=(graph/onnx_import.cc graph/onnx_fold.cc graph/onnx_patterns.cc graph/onnx_tensor.cc
      graph/graph_builder.cc)

object_of() { echo "$WORK/obj/$(basename "$1" .cc).o"; }

# Compiles every source once, as many at a time as there are cores.
compile_all() {
  echo "compiling $# sources with clang"
  local source running=0
  for source in "$@"; do
    "$CXX" "${COMPILE[@]}" -c "$source" -o "$(object_of "$source")" &
    running=$((running + 1))
    if ((running >= $(nproc))); then wait -n; running=$((running - 1)); fi
  done
  wait
}

link() {
  local name=$1 objects=() source
  shift
  for source in "fuzz/$name.cc" "$@"; do objects+=("$(object_of "$source")"); done
  "$CXX" "${objects[@]}" "${LINK[@]}" -o "$WORK/$name"
}

# Runs target $1: its regressions once each, then $2 inputs (or FUZZ_SECONDS of fuzzing).
fuzz() {
  local name=$1 corpus="$WORK/corpus/$1"
  mkdir -p "$corpus"
  cp fuzz/corpus/"$name"/* "$corpus"/
  if compgen -G "fuzz/regressions/$name/*" >/dev/null; then
    "$WORK/$name" -runs=0 fuzz/regressions/"$name"/* >"$WORK/$name.regressions.log" 2>&1 ||
      { tail -n 40 "$WORK/$name.regressions.log"; echo "FAIL: $name regression" >&2; exit 1; }
    echo "ok $name: $(ls fuzz/regressions/"$name" | wc -l) regression input(s) replayed"
  fi
  local budget=(-seed=1 -runs="$2")
  [[ -n "$FUZZ_SECONDS" ]] && budget=(-max_total_time="$FUZZ_SECONDS")
  local rc=0
  (cd "$OUT" && "$WORK/$name" "${budget[@]}" -rss_limit_mb=2048 -timeout=10 \
     -print_final_stats=1 "$corpus") >"$WORK/$name.log" 2>&1 || rc=$?
  if ((rc != 0)); then
    grep -E 'ERROR|SUMMARY|runtime error' "$WORK/$name.log" | head -n 20
    echo "FAIL: $name crashed; the input is under $OUT" >&2
    exit 1
  fi
  local done_line
  done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$WORK/$name.log" | tail -n 1 || true)
  echo "ok $name: ${done_line:-no DONE line} ($(ls "$corpus" | wc -l) corpus inputs)"
}

compile_all fuzz/graph_loader_fuzzer.cc fuzz/onnx_import_fuzzer.cc "${LOADER[@]}" "${ONNX[@]}"
link graph_loader_fuzzer "${LOADER[@]}"
link onnx_import_fuzzer "${LOADER[@]}" "${ONNX[@]}"
# About ten seconds each on this machine.
fuzz graph_loader_fuzzer 200000
fuzz onnx_import_fuzzer 60000
echo PASS
