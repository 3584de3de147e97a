#!/usr/bin/env python3
"""Median training-step time of a model in this machine's PyTorch, on its GPU.

The baseline beside `headroom train --backend cuda` in tools/gpu/run.sh:
  --model resnet50     torchvision's own resnet50 (1000 classes, 224x224 images)
  --model transformer  a GPT-2-style decoder as Headroom's zoo builds it: learned token and
                       position embeddings, pre-norm blocks (causal attention through
                       F.scaled_dot_product_attention, tanh-GELU MLP of 4*d_model), a final
                       LayerNorm and a head tied to the token embedding, dropout everywhere
                       GPT-2 has it
Training is float32 with PyTorch's defaults (cuDNN may use TF32 for convolutions; matmuls do
not; cudnn.benchmark off), synthetic data made once on the device, SGD with momentum 0.9
(lr 0.01) or Adam (lr 0.001). One step is zero_grad, forward, cross-entropy, backward and
optimizer.step, timed with torch.cuda.synchronize() on both sides; --warmup steps first.
Prints one JSON object: model, batch, median_step_seconds, step_seconds, torch, device.
(--device cpu runs the same on the CPU, only to check the script where there is no GPU.)
"""

import argparse
import json
import math
import statistics
import sys
import time


def resnet50(torch, args):
    import torchvision

    model = torchvision.models.resnet50(num_classes=1000)
    x = torch.randn(args.batch, 3, args.image_size, args.image_size)
    y = torch.randint(0, 1000, (args.batch,))
    return model, x, y


def transformer(torch, args):
    nn = torch.nn
    F = torch.nn.functional
    d, heads, p = args.d_model, args.heads, args.dropout

    def attention(q, k, v, dropout):
        if hasattr(F, "scaled_dot_product_attention"):  # PyTorch 2
            return F.scaled_dot_product_attention(q, k, v, dropout_p=dropout, is_causal=True)
        t = q.shape[-2]
        mask = torch.ones(t, t, dtype=torch.bool, device=q.device).triu(1)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
        return F.dropout(s.masked_fill(mask, float("-inf")).softmax(-1), dropout) @ v

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln_1 = nn.LayerNorm(d)
            self.c_attn = nn.Linear(d, 3 * d)
            self.c_proj = nn.Linear(d, d)
            self.ln_2 = nn.LayerNorm(d)
            self.c_fc = nn.Linear(d, 4 * d)
            self.mlp_proj = nn.Linear(4 * d, d)
            self.drop = nn.Dropout(p)

        def forward(self, x):
            b, t, _ = x.shape
            q, k, v = self.c_attn(self.ln_1(x)).split(d, dim=2)
            q, k, v = (z.view(b, t, heads, d // heads).transpose(1, 2) for z in (q, k, v))
            a = attention(q, k, v, p if self.training else 0.0)
            x = x + self.drop(self.c_proj(a.transpose(1, 2).reshape(b, t, d)))
            m = self.mlp_proj(F.gelu(self.c_fc(self.ln_2(x)), approximate="tanh"))
            return x + self.drop(m)

    class Gpt(nn.Module):
        def __init__(self):
            super().__init__()
            self.wte = nn.Embedding(args.vocab, d)
            self.wpe = nn.Embedding(args.sequence, d)
            self.drop = nn.Dropout(p)
            self.h = nn.ModuleList(Block() for _ in range(args.layers))
            self.ln_f = nn.LayerNorm(d)

        def forward(self, tokens):
            pos = torch.arange(tokens.shape[1], device=tokens.device)
            x = self.drop(self.wte(tokens) + self.wpe(pos))
            for block in self.h:
                x = block(x)
            return (self.ln_f(x) @ self.wte.weight.t()).reshape(-1, args.vocab)

    tokens = torch.randint(0, args.vocab, (args.batch, args.sequence))
    labels = torch.randint(0, args.vocab, (args.batch * args.sequence,))
    return Gpt(), tokens, labels


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--model", choices=["resnet50", "transformer"], required=True)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--image_size", type=int, default=224)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--d_model", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--sequence", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=50257)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--optimizer", choices=["sgd", "adam"], default="sgd")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                        help="cpu only to check the script itself")
    args = parser.parse_args()

    import torch

    on_gpu = args.device == "cuda"
    if on_gpu and not torch.cuda.is_available():
        print("torch_step_time: PyTorch sees no CUDA device", file=sys.stderr)
        return 1
    torch.manual_seed(1)
    model, x, y = (resnet50 if args.model == "resnet50" else transformer)(torch, args)
    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    model, x, y = model.to(dev).train(), x.to(dev), y.to(dev)
    if args.optimizer == "adam":
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    else:
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)

    seconds, losses = [], []
    for i in range(args.warmup + args.steps):
        sync()
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        sync()
        if i >= args.warmup:
            seconds.append(time.perf_counter() - t0)
            losses.append(loss.item())
    if not all(math.isfinite(l) for l in losses):
        print("torch_step_time: a loss is not finite: %s" % losses, file=sys.stderr)
        return 1
    print(json.dumps({
        "model": args.model,
        "batch": args.batch,
        "optimizer": args.optimizer,
        "median_step_seconds": statistics.median(seconds),
        "step_seconds": seconds,
        "peak_allocated_bytes": torch.cuda.max_memory_allocated() if on_gpu else None,
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if on_gpu else "cpu",
        "cudnn_allow_tf32": torch.backends.cudnn.allow_tf32,
        "matmul_allow_tf32": torch.backends.cuda.matmul.allow_tf32,
        "sdpa": hasattr(torch.nn.functional, "scaled_dot_product_attention"),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
