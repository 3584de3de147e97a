#!/usr/bin/env bash
# Every byte in the plan, as the operating system counts it: `headroom profile` samples its
# own resident set (/proc) at every node boundary and exits 1 when the bytes no plan holds
# (peak - baseline - arena - host pool) exceed max(5% of the plan, 32 MiB). Each model runs
# unconstrained and at its smallest feasible budget (the frontier's last point), in a
# process of its own.
set -euo pipefail

HEADROOM="$TEST_SRCDIR/headroom/clients/headroom"
PYTHON=/usr/bin/python3

failures=0
check() {
  local name="$1"
  shift
  local smallest
  smallest=$("$HEADROOM" plan "$@" --frontier --json |
    "$PYTHON" -c 'import json,sys; print(min(int(p["peak_bytes"]) for p in json.load(sys.stdin)["frontier"] if p["strategy"] in ("search", "refined")))')
  local budget
  for budget in "" "$smallest"; do
    local plan=()
    [[ -n "$budget" ]] && plan=(--budget "$budget")
    local out rc=0
    out=$("$HEADROOM" profile "$@" --steps 3 "${plan[@]}" --json) || rc=$?
    local line
    line=$(echo "$out" | "$PYTHON" -c '
import json, sys
p = json.load(sys.stdin)["process"]
mib = lambda k: int(p.get(k, 0)) / 2**20
print("arena %.1f MiB, host pool %.1f MiB, physical peak %.1f MiB over a baseline of %.1f MiB: "
      "unplanned %.1f MiB (bound %.1f MiB)" % (mib("arena_bytes"), mib("host_pool_bytes"),
      mib("physical_peak_bytes"), mib("baseline_bytes"), mib("unplanned_bytes"),
      mib("unplanned_limit_bytes")))
sys.exit(0 if int(p.get("unplanned_bytes", 0)) <= int(p["unplanned_limit_bytes"]) and
         not p.get("unavailable_reason") else 1)') || rc=1
    local what="$name ${budget:+at its smallest budget $budget B}"
    if ((rc == 0)); then
      echo "ok   $what: $line"
    else
      echo "FAIL $what: $line"
      failures=$((failures + 1))
    fi
  done
}

check mlp --model mlp --batch 256
check resnet18-64x64 --model resnet18 --batch 16 --image_size 64
check transformer --model transformer --batch 4 --layers 4 --d_model 256 --heads 4 \
  --sequence 128 --positions 128 --vocab 8192
((failures == 0)) || { echo "FAIL: $failures run(s) used memory no plan holds beyond the bound"; exit 1; }
echo "PASS"
