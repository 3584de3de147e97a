#!/usr/bin/python3
"""An independent count of a bf16 plan's activation bytes.

Reads a float32 forward graph written by `headroom graph --emit FILE.pbtxt` and the JSON of
`headroom plan --precision bf16 --tensors --json` for the same model, and checks every
forward activation of the plan against numel x 2 bytes (the loss: 4), and every cast of the
policy (docs/planner.md, issue 24) against its tensor's numel x 2, from the graph's shapes
alone. Prints the totals and exits 1 on any mismatch.

  headroom graph --model resnet18 --batch 8 --emit /tmp/r18.pbtxt
  headroom plan --model resnet18 --batch 8 --precision bf16 --backend none --tensors --json \
      > /tmp/r18_bf16.json
  /usr/bin/python3 bench/bf16_sizes.py /tmp/r18.pbtxt /tmp/r18_bf16.json
"""
import json
import re
import sys


def parse_graph(path):
    text = open(path).read()
    tensors, nodes = {}, []
    for block in re.findall(r"tensors \{(.*?)\n\}", text, re.S):
        name = re.search(r'name: "([^"]*)"', block).group(1)
        shape = [int(x) for x in re.findall(r"shape: (\d+)", block)]
        dtype = re.search(r"dtype: (\w+)", block)
        role = re.search(r"role: (\w+)", block)
        tensors[name] = (shape, dtype.group(1) if dtype else "", role.group(1) if role else "")
    for block in re.findall(r"nodes \{(.*?)\n\}", text, re.S):
        op = re.search(r'op: "([^"]*)"', block).group(1)
        inputs = re.findall(r'inputs: "([^"]*)"', block)
        outputs = re.findall(r'outputs: "([^"]*)"', block)
        nodes.append((op, inputs, outputs))
    loss = re.search(r'^loss: "([^"]*)"', text, re.M).group(1)
    return tensors, nodes, loss


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


def main():
    tensors, nodes, loss = parse_graph(sys.argv[1])
    plan = {t["name"]: t for t in json.load(open(sys.argv[2]))["tensors"]}
    expected = {}
    for op, inputs, outputs in nodes:
        for out in outputs:
            expected[out] = numel(tensors[out][0]) * (4 if out == loss else 2)
        for x in inputs:
            shape, dtype, role = tensors[x]
            if dtype != "DTYPE_FLOAT32":
                continue
            if (role == "ROLE_PARAMETER" and op in ("Conv2D", "MatMul", "Embedding")) or \
                    role == "ROLE_INPUT":
                expected[x + ".bf16"] = numel(shape) * 2
    bad, total = 0, 0
    for name, bytes_ in expected.items():
        got = plan.get(name)
        if got is None or int(got["bytes"]) != bytes_:
            bad += 1
            print("mismatch", name, bytes_, got and got["bytes"])
        total += bytes_
    planned = sum(int(plan[n]["bytes"]) for n in expected if n in plan)
    print(f"{len(expected)} forward activations and casts: counted {total} B, "
          f"planned {planned} B, {bad} mismatches")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
