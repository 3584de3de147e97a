#!/usr/bin/env bash
# Writes fuzz/corpus/service_request_fuzzer/: a few valid requests of each RPC, as
# fuzz/service_request_fuzzer.cc reads them (a byte naming the RPC, then the serialized
# request), from the text below and the other fuzzers' seed models. Run from anywhere:
#   fuzz/make_service_request_seeds.sh
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=fuzz/corpus/service_request_fuzzer
rm -rf "$OUT"
mkdir -p "$OUT"

# seed FILE RPC MESSAGE TEXT: the byte RPC (its index in the fuzzer's Rpc), then MESSAGE
# encoded from TEXT.
seed() {
  { printf "\\x$(printf %02x "$2")"
    protoc --encode="headroom.proto.$3" proto/headroom.proto <<<"$4"; } >"$OUT/$1"
}

MLP_GRAPH=$(protoc --decode=headroom.proto.GraphDef proto/headroom.proto \
  <fuzz/corpus/graph_loader_fuzzer/mlp.pb)
ONNX_MLP=$(python3 -c 'import sys; print("".join("\\%03o" % b for b in open(sys.argv[1], "rb").read()))' \
  fuzz/corpus/onnx_import_fuzzer/tiny_mlp.onnx)
ZOO_MLP='zoo { name: "mlp" batch: 4 options { key: "depth" value: 2 }
               options { key: "width" value: 8 } options { key: "input" value: 8 } }'
ZOO_GPT='zoo { name: "transformer" batch: 1 options { key: "layers" value: 1 }
               options { key: "d_model" value: 16 } options { key: "heads" value: 2 }
               options { key: "sequence" value: 8 } options { key: "positions" value: 8 }
               options { key: "vocab" value: 32 } options { key: "d_ff" value: 32 } }'
JOB=job-000001  # The job every daemon of the fuzzer starts with, run to its end.

# 0 Plan
seed plan_zoo_mlp 0 PlanRequest "model { $ZOO_MLP }"
seed plan_graph_budget 0 PlanRequest "model { graph { $MLP_GRAPH } }
  options { budget_bytes: 20000 tensors: true alignment_bytes: 64 }"
seed plan_onnx 0 PlanRequest "model { onnx_model: \"$ONNX_MLP\" onnx { batch: 2 } }
  options { frontier: true }"
seed plan_transformer_adam 0 PlanRequest "model { $ZOO_GPT }
  options { optimizer { kind: KIND_ADAM } host_memory: HOST_MEMORY_SEPARATE budget_bytes: 200000 }"
seed plan_inference 0 PlanRequest "model { $ZOO_MLP } options { inference: true }"
# 1 Profile
seed profile_mlp 1 ProfileRequest "model { $ZOO_MLP } steps: 1 seed: 3"
seed profile_graph_trace 1 ProfileRequest "model { graph { $MLP_GRAPH } } steps: 2 trace: true"
# 2 SubmitJob
seed submit_mlp 2 SubmitJobRequest "spec { name: \"tiny\" model { $ZOO_MLP } train { steps: 2 } }"
seed submit_graph_budget 2 SubmitJobRequest "spec { model { graph { $MLP_GRAPH } }
  plan { budget_bytes: 100000 } train { steps: 1 checkpoint_interval_steps: 1 } }"
seed submit_onnx 2 SubmitJobRequest "spec { model { onnx_model: \"$ONNX_MLP\" onnx { batch: 2 } }
  train { steps: 1 } }"
# 3 WatchJob, 4 CancelJob, 6 GetJob, 7 GetTimeline
seed watch 3 WatchJobRequest "job_id: \"$JOB\""
seed cancel 4 CancelJobRequest "job_id: \"$JOB\""
seed cancel_unknown 4 CancelJobRequest "job_id: \"job-000099\""
seed get 6 GetJobRequest "job_id: \"$JOB\""
seed timeline 7 GetTimelineRequest "job_id: \"$JOB\" max_samples: 10"
seed timeline_all 7 GetTimelineRequest "job_id: \"$JOB\""
# 5 ListJobs
seed list 5 ListJobsRequest ""
seed list_page 5 ListJobsRequest "states: JOB_STATE_SUCCEEDED states: JOB_STATE_QUEUED page_size: 1"
seed list_token 5 ListJobsRequest "page_size: 1 page_token: \"1\""
# 8 ListProfiles
seed profiles 8 ListProfilesRequest ""
seed profiles_summaries 8 ListProfilesRequest "summaries_only: true"
# 9 UploadJob: chunks, each after its 2-byte little-endian length.
upload() {
  local name=$1 spec_text=$2 model=$3 tmp
  tmp=$(mktemp -d)
  protoc --encode=headroom.proto.SubmitJobChunk proto/headroom.proto <<<"$spec_text" >"$tmp/0"
  python3 - "$tmp/0" "$model" "$OUT/$name" <<'PY'
import sys
spec, model, out = sys.argv[1], sys.argv[2], sys.argv[3]
def frame(b):
    return len(b).to_bytes(2, "little") + b
def chunk(b):  # SubmitJobChunk{onnx_model_chunk: b}: field 2, length-delimited.
    n, varint = len(b), b""
    while True:
        varint += bytes([(n & 0x7F) | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            break
    return b"\x12" + varint + b
data = open(model, "rb").read()
half = len(data) // 2
with open(out, "wb") as f:
    f.write(b"\x09" + frame(open(spec, "rb").read()))
    f.write(frame(chunk(data[:half])) + frame(chunk(data[half:])))
PY
  rm -r "$tmp"
}
MLP_ONNX_BYTES=$(stat -c %s fuzz/corpus/onnx_import_fuzzer/tiny_mlp.onnx)
upload upload_onnx "spec { name: \"up\" model { onnx { batch: 2 } } train { steps: 1 } }
  onnx_model_bytes: $MLP_ONNX_BYTES" fuzz/corpus/onnx_import_fuzzer/tiny_mlp.onnx
upload upload_short "spec { model { onnx { batch: 2 } } train { steps: 1 } }
  onnx_model_bytes: 99999" fuzz/corpus/onnx_import_fuzzer/tiny_mlp.onnx
ls "$OUT" | wc -l
