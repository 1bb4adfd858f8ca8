"""PyTorch's side of bench/ddp: DistributedDataParallel with the gloo backend, 2 processes on
loopback, 1 thread each, training a model spec (model.json with every default filled in, built by
examples/pytorch/load_model.py) on Fashion-MNIST read from Debian's IDX files (the source of
ft-train's Arrow copy). A step is what ft-train's step_ms covers: gather the rank's half of the
global batch from the uint8 images and scale it, forward, backward (DDP's bucketed allreduce,
overlapped with it), SGD update with ft-train's defaults (lr 0.01, momentum 0.9, weight decay
5e-4). Prints one JSON line: {"step_ms": median over the steps after warm-up, on rank 0}.

Usage: pytorch_ddp.py MODEL_JSON GLOBAL_BATCH STEPS WARMUP IDX_DIR"""
import gzip
import json
import os
import socket
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.nn.parallel import DistributedDataParallel

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / 'examples' / 'pytorch'))
from load_model import SpecModel  # noqa: E402

WORLD = 2


def read_idx(path, magic):
    """An IDX file (gzip): big-endian magic and dimensions, then uint8 data."""
    raw = gzip.decompress(Path(path).read_bytes())
    dims = raw[3]
    header = np.frombuffer(raw, dtype='>u4', count=1 + dims)
    if header[0] != magic:
        raise ValueError(f'{path}: magic {header[0]}, expected {magic}')
    return np.frombuffer(raw, dtype=np.uint8, offset=4 * (1 + dims)).reshape(tuple(int(d) for d in header[1:]))


def train(rank, port, spec, batch, steps, warmup, idx_dir, results):
    torch.set_num_threads(1)
    dist.init_process_group('gloo', init_method=f'tcp://127.0.0.1:{port}', rank=rank, world_size=WORLD)
    torch.manual_seed(1)
    model = DistributedDataParallel(SpecModel(spec))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)
    loss_fn = nn.CrossEntropyLoss()
    images = torch.from_numpy(read_idx(Path(idx_dir) / 'train-images-idx3-ubyte.gz', 2051).copy())
    labels = torch.from_numpy(read_idx(Path(idx_dir) / 'train-labels-idx1-ubyte.gz', 2049).astype(np.int64))
    per_rank = batch // WORLD
    order = torch.randperm(len(labels), generator=torch.Generator().manual_seed(1))
    times = []
    for step in range(steps):
        started = time.perf_counter()
        first = (step * batch + rank * per_rank) % (len(labels) - per_rank)
        rows = order[first:first + per_rank]
        x = images[rows].reshape(per_rank, *spec['input']).float().div_(255)
        optimizer.zero_grad()
        loss_fn(model(x), labels[rows]).backward()
        optimizer.step()
        times.append(time.perf_counter() - started)
    if rank == 0:
        results.put(statistics.median(times[warmup:]) * 1000)
    dist.destroy_process_group()


def main():
    spec_file, batch, steps, warmup, idx_dir = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
    spec = json.loads(Path(spec_file).read_text())
    with socket.socket() as probe:  # a free port for the rendezvous
        probe.bind(('127.0.0.1', 0))
        port = probe.getsockname()[1]
    os.environ.setdefault('GLOO_SOCKET_IFNAME', 'lo')
    results = mp.get_context('spawn').SimpleQueue()
    mp.spawn(train, args=(port, spec, batch, steps, warmup, idx_dir, results), nprocs=WORLD)
    print(json.dumps({'step_ms': results.get()}), flush=True)


if __name__ == '__main__':
    main()
