#!/bin/bash
# Builds Headroom's GPU kit: every CUDA test binary, the CLI and headroomd, with the shared
# libraries they need, in one file to carry to a GPU machine (docs/gpu.md).
#
# Usage, from anywhere in a checkout that has the CUDA toolkit (see @local_cuda's found.txt):
#   tools/gpu/make_kit.sh [OUT_FILE]        (default: <repo>/out/gpukit/kit.tar.xz)
#
# The tests are found by query, so a CUDA test added later is packed without editing this:
# every cc_test under //executor/cuda/..., //util and //profiler that links the CUDA runtime
# (CPU-only tests there, such as parity_testing_test, stay behind), and any cc_test tagged "gpu".
# Libraries: what `ldd` lists for the binaries, except glibc and the NVIDIA driver (the
# machine's own), and cuDNN, cuBLAS, cuBLASLt and NVRTC (hundreds of MB; run.sh finds the
# machine's). libstdc++ and libgcc_s go to fallback/, used only where the machine's are older.
# The kit unpacks to kit/{bin,lib,fallback} plus run.sh, torch_step_time.py, figures.py and
# MANIFEST; it must stay under 64 MiB, the device tool's limit on what travels.
set -euo pipefail

REPO=$(git -C "$(dirname "$(readlink -f "$0")")" rev-parse --show-toplevel)
HERE=$REPO/tools/gpu
OUT_FILE=${1:-$REPO/out/gpukit/kit.tar.xz}
MAX_BYTES=$((64 * 1024 * 1024))
cd "$REPO"

# The toolkit as @local_cuda found it (found.txt says where each library came from).
bazel query --noshow_progress @local_cuda//:all >/dev/null 2>&1 || true   # fetches @local_cuda
LOCAL_CUDA=$(bazel info output_base 2>/dev/null)/external/local_cuda
if ! grep -q "HAVE_CUDA = True" "$LOCAL_CUDA/defs.bzl" 2>/dev/null; then
  echo "make_kit: Bazel found no usable CUDA toolkit here:" >&2
  cat "$LOCAL_CUDA/found.txt" >&2 2>/dev/null || true
  exit 1
fi

QUERY='kind(cc_test, rdeps(//executor/cuda/... + //util:all + //profiler:all, @local_cuda//:cudart))
  + attr(tags, "\bgpu\b", kind(cc_test, //...))'
echo "make_kit: finding the CUDA tests"
mapfile -t TESTS < <(bazel query --noshow_progress "$QUERY" 2>/dev/null | sort)
[ "${#TESTS[@]}" -gt 0 ] || { echo "make_kit: the query found no CUDA tests" >&2; exit 1; }
printf '  %s\n' "${TESTS[@]}"

echo "make_kit: building"
bazel build --noshow_progress "${TESTS[@]}" //clients:headroom //server:headroomd

# //pkg/sub:name -> bazel-bin/pkg/sub/name
BINS=()
for t in "${TESTS[@]}" //clients:headroom //server:headroomd; do
  p=${t#//}; BINS+=("bazel-bin/${p%%:*}/${p#*:}")
done

W=$(mktemp -d); trap 'rm -rf "$W"' EXIT
K=$W/kit; mkdir -p "$K/bin" "$K/lib" "$K/fallback"
for b in "${BINS[@]}"; do
  [ -e "$K/bin/$(basename "$b")" ] && { echo "make_kit: two binaries named $(basename "$b")" >&2; exit 1; }
  cp -L "$b" "$K/bin/"
done

echo "make_kit: collecting shared libraries"
MISSING=""
while read -r name path; do
  case $name in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|libutil.so.*|libresolv.so.*|\
    libanl.so.*|libnsl.so.*|libmvec.so.*|ld-linux*) ;;                  # glibc: the machine's
    libcuda.so.*|libnvidia-*) ;;                                         # the driver: the machine's
    libcudnn*.so.*|libcublas.so.*|libcublasLt.so.*|libnvrtc*.so.*) ;;   # large: the machine's
    libstdc++.so.*|libgcc_s.so.*) cp -L "$path" "$K/fallback/" ;;
    *)
      if [ "$path" = "not" ]; then MISSING="$MISSING $name"; else cp -L "$path" "$K/lib/"; fi ;;
  esac
done < <(for b in "${BINS[@]}"; do ldd "$b"; done | awk '/=>/ {print $1, $3}' | sort -u)
if [ -n "$MISSING" ]; then
  echo "make_kit: ldd found no file for:$MISSING (the kit's binaries will need them on the GPU machine)" >&2
fi

chmod -R u+w "$K"
strip --strip-unneeded "$K"/bin/* "$K"/lib/*.so* 2>/dev/null || true
cp "$HERE/run.sh" "$HERE/torch_step_time.py" "$HERE/figures.py" "$K/"
{
  echo "commit $(git rev-parse HEAD)$(git diff --quiet HEAD -- . 2>/dev/null || echo ' (with uncommitted changes)')"
  echo "built $(date -u +%Y-%m-%dT%H:%M:%SZ) on $(uname -n)"
  echo "tests ${TESTS[*]}"
  sed 's/^/found /' "$LOCAL_CUDA/found.txt"
} >"$K/MANIFEST"

mkdir -p "$(dirname "$OUT_FILE")"
echo "make_kit: compressing"
XZ_OPT=${XZ_OPT:--6 -T2} tar -C "$W" -cJf "$OUT_FILE" kit
SIZE=$(stat -c %s "$OUT_FILE")
echo "make_kit: $OUT_FILE: $((SIZE / 1024 / 1024)) MiB compressed ($SIZE bytes), $(du -sh "$K" | cut -f1) unpacked," \
  "${#BINS[@]} binaries, $(ls "$K/lib" | wc -l) libraries"
if [ "$SIZE" -ge "$MAX_BYTES" ]; then
  echo "make_kit: the kit is over 64 MiB, more than the device tool carries" >&2
  exit 1
fi
