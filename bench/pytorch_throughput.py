"""PyTorch's side of bench/throughput, a long-lived child so that the bench can alternate with it
in short rounds: each line on stdin is a request {"spec": <a model spec, every default filled in>,
"batch": B, "seconds": S[, "device": "cuda", "input": "host", "deterministic": true]}; the answer is one line {"model", "images_per_s", "steps"}: full SGD
training steps (forward, backward, update, like ft-train's) of that model on one thread, timed for
S seconds. A language model's spec ("context", "vocab") trains on random token windows with AdamW
(decay on matrices only, as ft-train's: {"lr", "weight_decay"} in the request) and answers
"tokens_per_s" beside "images_per_s" (windows per second), on the CPU or (windows kept there) the
GPU. The model is built once per spec name, by examples/pytorch/load_model.py's SpecModel (the one
rebuilder of ft-train specs in PyTorch), and warmed up on first use."""
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'examples' / 'pytorch'))
from load_model import SpecModel  # noqa: E402


def language_trainer(spec, batch, request):
    """One training step of a language model on fixed random windows: AdamW, cross-entropy at every position."""
    device = float32_on(request.get('device', 'cpu'))
    model = SpecModel(spec).to(device)
    model.train()
    matrices = [p for p in model.parameters() if p.dim() >= 2]
    others = [p for p in model.parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{'params': matrices, 'weight_decay': request['weight_decay']}, {'params': others, 'weight_decay': 0.0}],
                                  lr=request['lr'], betas=(0.9, 0.999), eps=1e-8)
    windows = torch.randint(0, spec['vocab'], (batch, spec['context'] + 1), device=device).float()
    targets = windows[:, 1:].reshape(-1).long()

    def step():
        optimizer.zero_grad()
        F.cross_entropy(model(windows).reshape(-1, spec['vocab']), targets).backward()
        optimizer.step()

    for _ in range(3):
        step()
    if device == 'cuda':
        torch.cuda.synchronize()
    return step


def float32_on(device):
    """device, with TF32 turned off there: float32 throughout, as ft-train's GPU backend computes."""
    if device == 'cuda':
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    return device


def trainer(spec, batch, request):
    """One training step of the spec's model on a fixed random batch, on request['device'] (default the CPU)."""
    if 'context' in spec:
        return language_trainer(spec, batch, request)
    device = float32_on(request.get('device', 'cpu'))
    model = SpecModel(spec).to(device)
    model.train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    x = torch.rand(batch, *spec['input'], device=device)
    y = torch.randint(0, spec['classes'], (batch,), device=device)
    # "host": each step moves its batch from (pageable) host memory to the device first, as a training
    # loop does with a DataLoader's batches; otherwise the batch stays where it is
    from_host = request.get('input') == 'host'
    x_host, y_host = x.cpu(), y.cpu()
    # "deterministic": only cuDNN's deterministic algorithms, as ft-train's GPU backend computes (the
    # flag is global to this process, so each step sets its own)
    deterministic = bool(request.get('deterministic'))

    def step():
        torch.backends.cudnn.deterministic = deterministic
        optimizer.zero_grad()
        if from_host:
            loss_fn(model(x_host.to(device)), y_host.to(device)).backward()
        else:
            loss_fn(model(x), y).backward()
        optimizer.step()

    for _ in range(10):
        step()
    if device == 'cuda':
        torch.cuda.synchronize()
    return step


def main():
    torch.set_num_threads(1)
    torch.manual_seed(1)
    steps_of = {}
    for line in sys.stdin:
        request = json.loads(line)
        spec, batch, seconds = request['spec'], request['batch'], request['seconds']
        key = (spec['name'], batch, request.get('device', 'cpu'), request.get('input'), bool(request.get('deterministic')))
        if key not in steps_of:
            steps_of[key] = trainer(spec, batch, request)
        step = steps_of[key]
        steps, start = 0, time.perf_counter()
        while time.perf_counter() - start < seconds:
            step()
            steps += 1
        if key[2] == 'cuda':
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
        answer = {'model': spec['name'], 'images_per_s': steps * batch / elapsed, 'steps': steps}
        if 'context' in spec:
            answer['tokens_per_s'] = steps * batch * spec['context'] / elapsed
        print(json.dumps(answer), flush=True)


main()
