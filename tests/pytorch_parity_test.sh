#!/usr/bin/env bash
# Against PyTorch: each model trains a few steps with `headroom train` under a budget that
# forces sections (95% of its unconstrained peak, or $PERCENT%; or $SECTIONS equal sections),
# exporting its graph, initial weights and batches; tools/torch_reference.py trains the same
# graph in Debian's PyTorch
# from the same weights on the same batches and fails unless every step's loss agrees within
# float tolerance (1e-3 relative + 1e-4 absolute).
set -euo pipefail

HEADROOM="$TEST_SRCDIR/headroom/clients/headroom"
REFERENCE="$TEST_SRCDIR/headroom/tools/torch_reference.py"
PYTHON=/usr/bin/python3

if ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "FAIL: $PYTHON cannot import torch; install python3-torch (./headroom test does)" >&2
  exit 1
fi

# Prints the "key": number value from the last JSON line of stdin.
json_field() { tail -n 1 | sed -n "s/.*\"$1\":\([0-9.e+-]*\).*/\1/p"; }

check() {
  local name="$1" steps="$2"
  shift 2
  local dir="$TEST_TMPDIR/$name"
  local peak plan
  if [[ -n "${SECTIONS:-}" ]]; then
    plan=(--sections "$SECTIONS")
    echo "== $name: training in $SECTIONS equal sections"
  else
    peak=$("$HEADROOM" train "$@" --steps 1 --json | json_field predicted_peak_bytes)
    plan=(--budget $((peak * ${PERCENT:-95} / 100)))
    echo "== $name: unconstrained peak $peak B, training under ${plan[1]} B"
  fi
  "$HEADROOM" train "$@" --steps "$steps" "${plan[@]}" --export "$dir" |
    grep -E "^training|^done"
  "$PYTHON" "$REFERENCE" "$dir" --threads 2 --no-memory
}

check mlp 6 --model mlp --batch 1024 --depth 6 --width 128
check resnet18 4 --model resnet18 --batch 8 --image_size 64
check transformer 6 --model transformer --batch 4 --layers 2 --d_model 64 --heads 4 \
  --sequence 32 --vocab 100 --positions 32 --dropout_percent 0
# Expand, Slice, HardSwish, HardSigmoid; so small that its patch convolution's scratch at
# the last node sets its smallest plan, which is then the plain step: 3 sections instead.
SECTIONS=3 check tiny_vit 6 --graph "$TEST_SRCDIR/headroom/examples/tiny_vit.pbtxt"
# LeakyReLU, ELU, SELU, Softplus, Sqrt, Erf and Mish (the activations from ONNX).
SECTIONS=2 check tiny_activations 6 --graph "$TEST_SRCDIR/headroom/examples/tiny_activations.pbtxt"
# Sub and Div of computed tensors, same-shape and broadcast over parameters.
SECTIONS=2 check tiny_arithmetic 6 --graph "$TEST_SRCDIR/headroom/examples/tiny_arithmetic.pbtxt"
# PReLU with a slope per feature and a shared one.
SECTIONS=2 check tiny_prelu 6 --graph "$TEST_SRCDIR/headroom/examples/tiny_prelu.pbtxt"
# ReduceSum, ReduceMax, ReduceMin (ties among ReLU's zeros) and a reversing Slice.
SECTIONS=2 check tiny_reduce 6 --graph "$TEST_SRCDIR/headroom/examples/tiny_reduce.pbtxt"
# MatMul with batch dims broadcast both ways, and one matrix against a batch.
SECTIONS=2 check tiny_matmul 6 --graph "$TEST_SRCDIR/headroom/examples/tiny_matmul.pbtxt"
# ConvTranspose2D (strided, grouped, output padding) and Resize (bilinear both ways, nearest).
SECTIONS=2 check tiny_upsample 6 --graph "$TEST_SRCDIR/headroom/examples/tiny_upsample.pbtxt"
# GroupNorm, an InstanceNorm and the per-pixel loss with ignored pixels.
SECTIONS=2 check tiny_segmentation 6 --graph "$TEST_SRCDIR/headroom/examples/tiny_segmentation.pbtxt"
echo "PASS: every model's losses agree with PyTorch's"
