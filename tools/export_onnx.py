#!/usr/bin/python3
"""Exports torchvision's classification models to ONNX, with random weights.

Nothing is downloaded: each model is built with weights=None (torchvision's own random
initialisation under --seed) and exported by torch.onnx.export in training mode, opset 17,
with a symbolic batch dimension named "batch" on the input ("images") and the output
("logits"), so that Headroom's importer can substitute any batch size.

Training mode, because Headroom trains what it imports: batch norm stays a
BatchNormalization node with its running statistics (an eval-mode export folds it into the
convolution and drops them), dropout stays, and every parameter keeps its PyTorch name (an
eval-mode export merges initializers of equal value behind Identity nodes). Stochastic depth
(convnext, efficientnet, swin, maxvit) is switched off (p = 0) for the export: in training
mode it would export random ops, and its memory effect is nil.

Run it with Debian's interpreter, which has PyTorch 1.13 and torchvision 0.14:

    /usr/bin/python3 tools/export_onnx.py --out DIR [--models resnet18,vit_b_16 | --all]
        [--image-size N] [--seed S] [--reference N] [--no-dropout] [--ops FILE] [--no-keep]

Besides torchvision's 80 names, --models takes small members of its families built with
torchvision's own classes (vit_test, swin_test, maxvit_test, convnext_test: the same exported
ops at a fraction of the size), gpt2_test, a GPT-2-style language model (token ids in,
logits [batch, 32, 512] out), activations_test, a small CNN through LeakyReLU, ELU, SELU,
Softplus, Sqrt, Erf and Mish, and arithmetic_test, one through PReLU, Sub, Div and Pow of
computed tensors, reduce_test, one through torch.flip, amax, amin and sum over axes,
matmul_test, one through torch.matmul with broadcast batch dims and 1-D operands,
upsample_test, a small segmentation-style net through ConvTranspose and Resize, and
norms_test, a small segmentation network through nn.GroupNorm and nn.InstanceNorm2d, for
quick checks. It also takes torchvision's segmentation models
(fcn_resnet50, deeplabv3_resnet50, deeplabv3_mobilenet_v3_large, lraspp_mobilenet_v3_large,
...), built without weights and without their auxiliary classifier; their output is the
dict's "out", [batch, 21, H, W].

Writes DIR/<model>.onnx; a model over protobuf's 2 GiB limit (vit_h_14, regnet_y_128gf) goes
to DIR/<model>/model.onnx with its weights in external files beside it, as torch writes them. With --reference N it also writes, per model, DIR/<model>.input.bin
(N images, float32, NCHW, little-endian) and DIR/<model>.output.bin: the model's logits for
them in training mode (batch statistics, as Headroom's training forward computes them), with
every Dropout's p set to 0 for the reference pass only, so that the logits are a function of
the weights and the images alone. With --ops FILE it writes
a JSON object {model: {op_type: count}} read back with the onnx package (python3-onnx),
and --no-keep deletes each .onnx file after counting (to survey all 80 models without
keeping 20 GB of weights).

Exit status: 0 if every asked model exported, 1 if any failed (each failure is printed
with its reason and the others still run).
"""

import argparse
import json
import math
import os
import shutil
import sys
import time
import warnings

import torch
import torchvision
from torchvision import models

class Gpt2Block(torch.nn.Module):
    """One GPT-2 block as Hugging Face writes it: Conv1D projections (x @ W + b), a causal
    mask from a lower-triangular buffer applied with torch.where, and the tanh GELU."""

    def __init__(self, d, heads, context):
        super().__init__()
        self.heads = heads
        self.ln_1 = torch.nn.LayerNorm(d)
        self.ln_2 = torch.nn.LayerNorm(d)
        self.c_attn_w = torch.nn.Parameter(torch.randn(d, 3 * d) * 0.02)
        self.c_attn_b = torch.nn.Parameter(torch.zeros(3 * d))
        self.c_proj_w = torch.nn.Parameter(torch.randn(d, d) * 0.02)
        self.c_proj_b = torch.nn.Parameter(torch.zeros(d))
        self.c_fc_w = torch.nn.Parameter(torch.randn(d, 4 * d) * 0.02)
        self.c_fc_b = torch.nn.Parameter(torch.zeros(4 * d))
        self.c_out_w = torch.nn.Parameter(torch.randn(4 * d, d) * 0.02)
        self.c_out_b = torch.nn.Parameter(torch.zeros(d))
        self.register_buffer("bias", torch.tril(torch.ones(context, context, dtype=torch.bool))
                             .view(1, 1, context, context))
        self.attn_dropout = torch.nn.Dropout(0.1)

    @staticmethod
    def gelu(x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                           (x + 0.044715 * torch.pow(x, 3.0))))

    def forward(self, x):
        b, t, d = x.size()
        q, k, v = (self.ln_1(x) @ self.c_attn_w + self.c_attn_b).split(d, dim=2)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        w = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.heads)
        mask = self.bias[:, :, :t, :t]
        w = torch.where(mask, w, torch.tensor(torch.finfo(w.dtype).min, dtype=w.dtype))
        w = self.attn_dropout(torch.softmax(w, dim=-1))
        a = torch.matmul(w, v).transpose(1, 2).contiguous().view(b, t, d)
        x = x + (a @ self.c_proj_w + self.c_proj_b)
        h = self.gelu(self.ln_2(x) @ self.c_fc_w + self.c_fc_b)
        return x + (h @ self.c_out_w + self.c_out_b)


class Gpt2(torch.nn.Module):
    """A GPT-2-style language model: token and position embeddings, blocks, a final layer
    norm and the LM head tied to the token embedding."""

    def __init__(self, vocab=512, context=32, d=64, layers=2, heads=4):
        super().__init__()
        self.wte = torch.nn.Embedding(vocab, d)
        self.wpe = torch.nn.Embedding(context, d)
        self.blocks = torch.nn.ModuleList(Gpt2Block(d, heads, context) for _ in range(layers))
        self.ln_f = torch.nn.LayerNorm(d)

    def forward(self, ids):
        positions = torch.arange(ids.size(1), dtype=torch.long).unsqueeze(0)
        x = self.wte(ids) + self.wpe(positions)
        for block in self.blocks:
            x = block(x)
        return self.ln_f(x) @ self.wte.weight.t()


class ActivationsNet(torch.nn.Module):
    """A small CNN through the activations beyond torchvision's classifiers: LeakyReLU, ELU,
    SELU, Softplus, sqrt, erf and Mish (which torch 1.13 exports at opset 17 as
    x * tanh(softplus(x)))."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(16, 32)
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        F = torch.nn.functional
        x = F.elu(F.leaky_relu(self.conv1(x), 0.2), alpha=0.5)
        x = F.selu(self.conv2(x))
        x = F.adaptive_avg_pool2d(x, 1).flatten(1)
        h = self.fc(x)
        return self.head(torch.sqrt(F.softplus(h)) + torch.erf(F.mish(h)))


class ArithmeticNet(torch.nn.Module):
    """A small CNN through PReLU (a slope per channel and a shared one), Sub and Div of two
    computed tensors (broadcast too) and Pow to constant exponents."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.act1 = torch.nn.PReLU(8)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.act2 = torch.nn.PReLU()
        self.fc = torch.nn.Linear(16, 32)
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        x = self.act1(self.conv1(x))
        x = self.act2(self.conv2(x))
        pooled = x.mean(dim=(2, 3), keepdim=True)
        x = (x - pooled) / (torch.sigmoid(pooled) + torch.sigmoid(x))
        x = x.mean(dim=(2, 3))
        h = self.fc(x)
        return self.head(torch.pow(torch.tanh(h), 3) - torch.sigmoid(h) ** 1.5)


class ReduceNet(torch.nn.Module):
    """A small CNN through torch.flip (a Slice with step -1), torch.amax, torch.amin and
    torch.sum over axes (ReduceMax, ReduceMin, ReduceSum) of computed tensors."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(48, 32)
        self.head = torch.nn.Linear(32, classes)

    def forward(self, x):
        x = torch.relu(self.conv1(x))
        x = torch.relu(self.conv2(torch.flip(x, [3])))
        peak = torch.amax(x, dim=(2, 3))
        floor = torch.amin(torch.tanh(self.conv2.bias.view(1, -1, 1, 1) - x), dim=3).sum(dim=2)
        total = torch.sum(x, dim=(2, 3), keepdim=True).flatten(1)
        h = torch.tanh(self.fc(torch.cat([peak, floor, total * 0.01], 1)))
        return self.head(torch.flip(h, [1]))


class MatMulNet(torch.nn.Module):
    """A small CNN through torch.matmul with broadcast batch dims ([N,1,6,4] x [3,4,5]) and
    1-D operands on either side (a vector as b, then as a)."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.fc = torch.nn.Linear(8, 24)
        self.mix = torch.nn.Parameter(0.5 * torch.randn(3, 4, 5))
        self.column = torch.nn.Parameter(0.5 * torch.randn(5))
        self.row = torch.nn.Parameter(0.5 * torch.randn(3))
        self.head = torch.nn.Linear(6, classes)

    def forward(self, x):
        x = torch.relu(self.conv(x)).mean(dim=(2, 3))
        rows = torch.tanh(self.fc(x)).view(x.size(0), 1, 6, 4)
        mixed = torch.tanh(torch.matmul(rows, self.mix))  # [N, 3, 6, 5]
        scores = torch.matmul(mixed, self.column)  # [N, 3, 6]
        return self.head(torch.matmul(self.row, scores))  # [N, 6]
class UpsampleNet(torch.nn.Module):
    """A small segmentation-style net: a strided encoder, nn.ConvTranspose2d (grouped, with
    output padding), nn.Upsample (nearest, scale 2), F.interpolate by 0.5 with
    align_corners=True, and back to the input's size as torchvision's segmentation heads do
    (F.interpolate(x, size=input_shape[-2:], mode="bilinear", align_corners=False), sizes that
    torch 1.13 writes through Shape, Gather, Slice and Concat); then a classification head."""

    def __init__(self, classes=10):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, stride=2, padding=1)
        self.conv2 = torch.nn.Conv2d(8, 16, 3, stride=2, padding=1)
        self.up = torch.nn.ConvTranspose2d(16, 8, 3, stride=2, padding=1, output_padding=1,
                                           groups=2)
        self.upsample = torch.nn.Upsample(scale_factor=2, mode="nearest")
        self.classifier = torch.nn.Conv2d(8, 4, 1)
        self.head = torch.nn.Linear(4, classes)

    def forward(self, x):
        F = torch.nn.functional
        input_shape = x.shape[-2:]
        f = F.relu(self.conv2(F.relu(self.conv1(x))))
        f = self.upsample(F.relu(self.up(f)))
        f = F.interpolate(f, scale_factor=0.5, mode="bilinear", align_corners=True)
        f = self.classifier(f)
        f = F.interpolate(f, size=input_shape, mode="bilinear", align_corners=False)
        return self.head(torch.sigmoid(f).mean(dim=(2, 3)))
class NormsNet(torch.nn.Module):
    """A small fully convolutional segmentation network through nn.GroupNorm (exported at
    opset 17 as Reshape, InstanceNormalization, Reshape, Mul, Add) and
    nn.InstanceNorm2d(affine=True) (InstanceNormalization), with [N, classes, H/2, W/2]
    logits, which the importer gives the per-pixel loss."""

    def __init__(self, classes=5):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 16, 3, padding=1)
        self.gn = torch.nn.GroupNorm(4, 16)
        self.conv2 = torch.nn.Conv2d(16, 16, 3, stride=2, padding=1)
        self.inorm = torch.nn.InstanceNorm2d(16, affine=True)
        self.classifier = torch.nn.Conv2d(16, classes, 1)
        # Away from their initial ones and zeros, so that the affine parts are tested.
        for norm in (self.gn, self.inorm):
            torch.nn.init.uniform_(norm.weight, 0.5, 1.5)
            torch.nn.init.uniform_(norm.bias, -0.5, 0.5)

    def forward(self, x):
        F = torch.nn.functional
        x = F.relu(self.gn(self.conv1(x)))
        x = F.relu(self.inorm(self.conv2(x)))
        return self.classifier(x)


def small_models():
    """Small members of torchvision's families (and a GPT-2-style model) that export to the
    same ops as the full-size ones, for quick checks: name -> (builder, input size)."""
    from torchvision.models import convnext, maxvit, swin_transformer, vision_transformer

    def vit():
        model = vision_transformer.VisionTransformer(
            image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64,
            num_classes=10)
        # torchvision starts the head at zero, which would make every logit 0.
        torch.nn.init.normal_(model.heads.head.weight, std=0.2)
        return model

    return {
        "vit_test": (vit, 32),
        "swin_test": (lambda: swin_transformer.SwinTransformer(
            patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
            window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10), 32),
        "maxvit_test": (lambda: maxvit.MaxVit(
            input_size=(32, 32), stem_channels=16, partition_size=2, block_channels=[16, 32],
            block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10), 32),
        "convnext_test": (lambda: convnext.ConvNeXt(
            block_setting=[convnext.CNBlockConfig(16, 32, 1), convnext.CNBlockConfig(32, None, 1)],
            num_classes=10), 32),
        "gpt2_test": (Gpt2, 32),  # the size is the context, in tokens
        "activations_test": (ActivationsNet, 32),
        "arithmetic_test": (ArithmeticNet, 32),
        "reduce_test": (ReduceNet, 32),
        "matmul_test": (MatMulNet, 32),
        "upsample_test": (UpsampleNet, 32),
        "norms_test": (NormsNet, 32),
    }


def segmentation_models():
    """torchvision 0.14's segmentation models (fcn_resnet50, deeplabv3_mobilenet_v3_large,
    lraspp_mobilenet_v3_large, ...): built without weights and without the auxiliary
    classifier, so that the export's one output is the dict's "out", [N, 21, H, W]."""
    return sorted(models.list_models(module=models.segmentation))


# Models whose input must be larger than the default 224 (their stems downsample more).
DEFAULT_SIZE = {"inception_v3": 299}
# Models that only take their training resolution (position embeddings, fixed windows).
FIXED_SIZE = {"vit_b_16", "vit_b_32", "vit_h_14", "vit_l_16", "vit_l_32", "maxvit_t"}


def all_models():
    return sorted(models.list_models(module=models))


def build(name, seed):
    torch.manual_seed(seed)
    if name in small_models():
        model = small_models()[name][0]()
        for m in model.modules():
            if isinstance(m, torchvision.ops.StochasticDepth):
                m.p = 0.0
        return model.train()
    kwargs = {}
    if name in segmentation_models():
        kwargs = {"weights_backbone": None, "aux_loss": False}
    elif name in ("googlenet", "inception_v3"):
        # Without weights torchvision adds auxiliary heads, which training mode would return
        # beside the logits; leave them out.
        kwargs = {"aux_logits": False, "init_weights": True}
    model = models.get_model(name, weights=None, **kwargs)
    for m in model.modules():
        if isinstance(m, torchvision.ops.StochasticDepth):
            m.p = 0.0
    return model.train()


def image_size(name, asked):
    if name in small_models():
        return small_models()[name][1]
    if name in FIXED_SIZE:
        return 224
    return asked or DEFAULT_SIZE.get(name, 224)


def export(model, out, name, size, batch=1):
    """Writes DIR/<name>.onnx; returns the path of what it wrote.

    A model over protobuf's 2 GiB limit comes out of torch as a small model file with one
    external file per weight beside it; those go into a folder of their own,
    DIR/<name>/model.onnx, and that path is returned.
    """
    scratch = os.path.join(out, "." + name + ".tmp")
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    # A batch of one by default; training-mode batch norms over 1x1 maps (deeplabv3's ASPP
    # pooling) need two samples.
    example = example_input(name, batch, size, torch.Generator().manual_seed(0))
    source = "ids" if name == "gpt2_test" else "images"
    with torch.no_grad():
        torch.onnx.export(
            model, example, os.path.join(scratch, "model.onnx"), input_names=[source],
            output_names=["logits"],
            dynamic_axes={source: {0: "batch"}, "logits": {0: "batch"}},
            opset_version=17, training=torch.onnx.TrainingMode.TRAINING,
            do_constant_folding=False)
    return place(scratch, out, name)


def place(scratch, out, name):
    """Moves the export torch wrote into `scratch` (model.onnx, and any external weight
    files) to DIR/<name>.onnx, or to DIR/<name>/ where it has weight files beside it;
    returns the model file's path."""
    remove(out, name)
    if os.listdir(scratch) == ["model.onnx"]:
        path = os.path.join(out, name + ".onnx")
        os.rename(os.path.join(scratch, "model.onnx"), path)
        os.rmdir(scratch)
        return path
    os.rename(scratch, os.path.join(out, name))
    return os.path.join(out, name, "model.onnx")


def remove(out, name):
    """Deletes what export() wrote for `name`."""
    path = os.path.join(out, name + ".onnx")
    if os.path.exists(path):
        os.remove(path)
    shutil.rmtree(os.path.join(out, name), ignore_errors=True)


def example_input(name, n, size, generator):
    """n images (or, for gpt2_test, n rows of `size` token ids)."""
    if name == "gpt2_test":
        return torch.randint(0, 512, (n, size), generator=generator)
    return torch.randn(n, 3, size, size, generator=generator)


def write_reference(model, name, out, size, n, seed):
    """Writes n inputs and the training-mode logits for them."""
    x = example_input(name, n, size, torch.Generator().manual_seed(seed + 1))
    for m in model.modules():
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    with torch.no_grad():
        y = model(x)
    if isinstance(y, dict):  # torchvision's segmentation models: {"out": logits}
        y = y["out"]
    x.numpy().astype("<i8" if name == "gpt2_test" else "<f4").tofile(
        os.path.join(out, name + ".input.bin"))
    y.numpy().astype("<f4").tofile(os.path.join(out, name + ".output.bin"))


def count_ops(path):
    import onnx  # python3-onnx; only --ops needs it
    proto = onnx.load(path, load_external_data=False)
    counts = {}
    for node in proto.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="directory for the .onnx files")
    parser.add_argument("--models", default="", help="comma-separated torchvision names")
    parser.add_argument("--all", action="store_true", help="every classification model")
    parser.add_argument("--image-size", type=int, default=0,
                        help="input height and width (default 224; 299 for inception_v3)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random weights")
    parser.add_argument("--reference", type=int, default=0, metavar="N",
                        help="also write N input images and PyTorch's logits for them")
    parser.add_argument("--ops", default="", help="write {model: {op: count}} here (JSON)")
    parser.add_argument("--no-dropout", action="store_true",
                        help="set every Dropout's p to 0 before the export (for comparing "
                             "the imported model's logits with the reference's)")
    parser.add_argument("--no-keep", dest="keep", action="store_false",
                        help="delete each .onnx after counting its ops")
    args = parser.parse_args()

    names = all_models() if args.all else [n for n in args.models.split(",") if n]
    if not names:
        parser.error("name --models or --all")
    unknown = sorted(set(names) - set(all_models()) - set(small_models()) -
                     set(segmentation_models()))
    if unknown:
        parser.error("not torchvision classification models (nor " +
                     ", ".join(sorted(small_models())) + "): " + ", ".join(unknown))
    os.makedirs(args.out, exist_ok=True)
    # torch.onnx warns once per batch norm that the export drops num_batches_tracked's
    # update (Headroom keeps no such counter) and about training-mode export in general.
    warnings.filterwarnings("ignore", category=UserWarning)
    torch.set_num_threads(max(1, os.cpu_count() or 1))

    ops, failed = {}, {}
    for i, name in enumerate(names):
        start = time.time()
        size = image_size(name, args.image_size)
        try:
            model = build(name, args.seed)
            if args.no_dropout:
                for m in model.modules():
                    if isinstance(m, torch.nn.Dropout):
                        m.p = 0.0
            params = sum(p.numel() for p in model.parameters())
            path = export(model, args.out, name, size)
            if args.reference:
                write_reference(model, name, args.out, size, args.reference, args.seed)
            if args.ops:
                ops[name] = count_ops(path)
            note = "%.1fM parameters, %dx%d, %s" % (params / 1e6, size, size, path)
        except Exception as e:  # one model's failure must not stop the others
            failed[name] = "%s: %s" % (type(e).__name__, str(e).splitlines()[0][:300])
            note = "FAILED " + failed[name]
        if not args.keep:
            remove(args.out, name)
        print("[%d/%d] %-22s %6.1f s  %s" % (i + 1, len(names), name, time.time() - start, note),
              flush=True)
        if args.ops:
            with open(args.ops, "w") as f:
                json.dump({"ops": ops, "failed": failed}, f, indent=1, sort_keys=True)
    print("%d exported, %d failed (torch %s, torchvision %s)" %
          (len(names) - len(failed), len(failed), torch.__version__, torchvision.__version__))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
