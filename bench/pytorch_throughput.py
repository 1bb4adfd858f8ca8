"""PyTorch's side of bench/throughput, a long-lived child so that the bench can alternate with it
in short rounds: each line on stdin is a request {"spec": <a model spec, every default filled in>,
"batch": B, "seconds": S}; the answer is one line {"model", "images_per_s", "steps"}: full SGD
training steps (forward, backward, update, like ft-train's) of that model on one thread, timed for
S seconds. The model is built once per spec name, by examples/pytorch/load_model.py's SpecModel (the
one rebuilder of ft-train specs in PyTorch), and warmed up on first use."""
import json
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'examples' / 'pytorch'))
from load_model import SpecModel  # noqa: E402


def trainer(spec, batch):
    """One training step of the spec's model on a fixed random batch."""
    model = SpecModel(spec)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, *spec['input'])
    y = torch.randint(0, spec['classes'], (batch,))

    def step():
        optimizer.zero_grad()
        loss_fn(model(x), y).backward()
        optimizer.step()

    for _ in range(10):
        step()
    return step


def main():
    torch.set_num_threads(1)
    torch.manual_seed(1)
    steps_of = {}
    for line in sys.stdin:
        request = json.loads(line)
        spec, batch, seconds = request['spec'], request['batch'], request['seconds']
        key = (spec['name'], batch)
        if key not in steps_of:
            steps_of[key] = trainer(spec, batch)
        step = steps_of[key]
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step()
            steps += 1
        elapsed = time.perf_counter() - start
        print(json.dumps({'model': spec['name'], 'images_per_s': steps * batch / elapsed, 'steps': steps}), flush=True)


main()
