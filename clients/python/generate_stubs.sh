#!/usr/bin/env bash
# Generates the Python gRPC stubs of proto/headroom.proto into headroom_client/_proto/, for
# using the client without Bazel (Bazel builds the same files as //clients/python:stubs).
#
#   clients/python/generate_stubs.sh [OUT_DIR]
#
# OUT_DIR defaults to clients/python/headroom_client/_proto. PROTOC, GRPC_PYTHON_PLUGIN and
# PROTO override the tools and the .proto file (the Bazel genrule sets them). Needs protoc and
# grpc_python_plugin (Debian: protobuf-compiler, protobuf-compiler-grpc); the generated code
# runs on python3-protobuf 3.21 and python3-grpcio, matching protoc 3.21.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
PROTO="${PROTO:-$HERE/../../proto/headroom.proto}"
OUT="${1:-$HERE/headroom_client/_proto}"
PROTOC="${PROTOC:-protoc}"
PLUGIN="${GRPC_PYTHON_PLUGIN:-$(command -v grpc_python_plugin || true)}"

if [[ -z "$PLUGIN" ]]; then
  echo "generate_stubs.sh: grpc_python_plugin not found; install protobuf-compiler-grpc" >&2
  exit 1
fi

mkdir -p "$OUT"
"$PROTOC" -I"$(dirname "$PROTO")" --python_out="$OUT" \
  --plugin=protoc-gen-grpc_python="$PLUGIN" --grpc_python_out="$OUT" "$PROTO"
# The plugin writes `import headroom_pb2`, a top-level module; the stubs live in the package
# headroom_client._proto, so the import becomes relative.
sed -i 's/^import headroom_pb2 as /from . import headroom_pb2 as /' "$OUT/headroom_pb2_grpc.py"
echo '"""Generated from proto/headroom.proto by protoc; do not edit."""' >"$OUT/__init__.py"
echo "wrote $OUT/{__init__,headroom_pb2,headroom_pb2_grpc}.py"
