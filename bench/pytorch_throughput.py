"""PyTorch's side of bench/throughput: the same model spec (models/*.json), batch and thread count,
a full SGD training step (forward, backward, update) timed the same way. Prints one JSON line per
model: {"model", "images_per_s"}. Usage: pytorch_throughput.py BATCH SECONDS SPEC..."""
import json
import sys
import time

import torch
from torch import nn


def build(spec):
    layers, shape = [], list(spec["input"])
    for layer in spec["layers"]:
        kind = layer["type"]
        if kind == "conv":
            layers.append(nn.Conv2d(shape[0], layer["filters"], layer["kernel"],
                                    layer.get("stride", 1), layer.get("pad", 0)))
            size = lambda d: (d + 2 * layer.get("pad", 0) - layer["kernel"]) // layer.get("stride", 1) + 1
            shape = [layer["filters"], size(shape[1]), size(shape[2])]
        elif kind in ("maxpool", "avgpool"):
            stride, pad = layer.get("stride", layer["kernel"]), layer.get("pad", 0)
            pool = nn.MaxPool2d if kind == "maxpool" else nn.AvgPool2d
            layers.append(pool(layer["kernel"], stride, pad))
            size = lambda d: (d + 2 * pad - layer["kernel"]) // stride + 1
            shape = [shape[0], size(shape[1]), size(shape[2])]
        elif kind == "flatten":
            layers.append(nn.Flatten())
            shape = [shape[0] * shape[1] * shape[2]] if len(shape) == 3 else shape
        elif kind == "linear":
            inputs = 1
            for d in shape:
                inputs *= d
            if len(shape) != 1:
                layers.append(nn.Flatten())
            layers.append(nn.Linear(inputs, layer["outputs"]))
            shape = [layer["outputs"]]
        elif kind == "relu":
            layers.append(nn.ReLU())
        elif kind == "dropout":
            layers.append(nn.Dropout(layer["p"]))
    return nn.Sequential(*layers)


def main():
    batch, seconds, files = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
    torch.set_num_threads(1)
    torch.manual_seed(1)
    for file in files:
        spec = json.load(open(file))
        model = build(spec)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
        loss_fn = nn.CrossEntropyLoss()
        x = torch.rand(batch, *spec["input"])
        y = torch.randint(0, spec["classes"], (batch,))

        def step():
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()

        for _ in range(10):
            step()
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step()
            steps += 1
        elapsed = time.perf_counter() - start
        print(json.dumps({"model": spec["name"], "images_per_s": steps * batch / elapsed}), flush=True)


main()
