#!/usr/bin/env bash
# `./headroom --help` (with the built CLI as HEADROOM_BIN, so nothing is built) lists every
# command: each command ./headroom's main() dispatches has its line in the script's part,
# and the CLI's own `headroom --help` follows in full. `help` and no arguments print the
# same. The script's part repeats none of headroomd's or the CLI's default addresses.
set -euo pipefail

RUNFILES="${TEST_SRCDIR:?run me with bazel test}/headroom"
WRAPPER="$RUNFILES/headroom"
CLI="$RUNFILES/clients/headroom"
TMP="${TEST_TMPDIR:?}"
export HEADROOM_BIN="$CLI" HOME="$TMP/home"

fail() { echo "FAIL: $*" >&2; exit 1; }

"$WRAPPER" --help >"$TMP/help.txt" || fail "./headroom --help exited $?"
"$WRAPPER" help >"$TMP/help2.txt" || fail "./headroom help exited $?"
"$WRAPPER" >"$TMP/help3.txt" || fail "./headroom with no arguments exited $?"
cmp -s "$TMP/help.txt" "$TMP/help2.txt" || fail "'help' prints other text than '--help'"
cmp -s "$TMP/help.txt" "$TMP/help3.txt" || fail "no arguments prints other text than '--help'"
cat "$TMP/help.txt"

# The script's own part: up to the line introducing the CLI's commands.
own="$(sed '/^Any other command/q' "$TMP/help.txt")"
[[ "$own" == *"Any other command"* ]] || fail "no line introducing the CLI's commands"

# Every case label of main() but the catch-all, e.g. "help | -h | --help" gives "help".
commands="$(sed -n '/^main() {/,/^}/p' "$WRAPPER" | sed -n 's/^    \([a-z][a-z-]*\)\( |.*\)\{0,1\})$/\1/p')"
[[ -n "$commands" ]] || fail "found no commands in ./headroom's main()"
for cmd in test demo bench serve help; do
  grep -qx "$cmd" <<<"$commands" || fail "main() dispatches no '$cmd' (the test's parse is stale)"
done
for cmd in $commands; do
  grep -q "^  $cmd\( \|$\)" <<<"$own" || fail "./headroom --help has no line for its command '$cmd'"
done

# The CLI's list, every line of it, in order, after the script's part.
"$CLI" --help | sed 's/^./  &/' >"$TMP/cli.txt"
[[ -s "$TMP/cli.txt" ]] || fail "headroom --help printed nothing"
tail -n "$(wc -l <"$TMP/cli.txt")" "$TMP/help.txt" | cmp -s - "$TMP/cli.txt" ||
  fail "./headroom --help does not end with the CLI's own command list"
for cmd in graph plan train profile submit jobs watch cancel timeline export; do
  grep -q "^ *$cmd " "$TMP/cli.txt" || fail "the CLI's help has no '$cmd' (the test's list is stale)"
done

# Defaults that headroomd and the CLI keep are theirs to print.
for port in 50051 9464; do
  [[ "$own" != *"$port"* ]] || fail "./headroom's own help repeats the default port $port"
done
echo PASS
