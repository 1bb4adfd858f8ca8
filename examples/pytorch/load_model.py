#!/usr/bin/env python3
"""Loads a model exported by ft-train (src/nn/export.ts) into PyTorch and evaluates it.

    python3 load_model.py MODEL_DIR DATA_DIR

MODEL_DIR holds model.json (the spec) and model.safetensors (float32 parameters and batchnorm
running statistics); DATA_DIR holds features.npy (uint8 or float32 [N, ...sample shape]),
labels.npy (int32 [N]) and split.json ({"divisor": D}), as src/data/npy.ts writes them. Prints
{"accuracy": ..., "loss": ..., "correct": ..., "samples": ...} on one line: the model in evaluation
mode on features / D (as ft-train feeds them), mean cross-entropy over the samples. A language
model (a spec with "context" and "vocab", made for a text dataset of ft-data text) reads each
sample as a window of context + 1 token ids and is scored at every position against the next
token: accuracy and loss are then per position, "correct" counts positions over the context.

The spec is a graph in topological order: a layer reads the previous layer's output unless it names
its "inputs" ("input" is the model input). Conventions match ft-train's kernels: conv weights OIHW
with bias, linear [out, in] on the flattened input (on a sequence [T, C]: at each position),
average pooling counts the padding (count_include_pad), batchnorm and layernorm with the spec's eps
(on a sequence: over each position's C values), causal attention over [T, 3C] (queries, keys,
values side by side), exact GELU, and a language-model head that shares the embedding's token table. safetensors is parsed by hand
(8-byte little-endian header length, JSON header, raw little-endian data), so only torch and numpy
are needed.
"""
import json
import struct
import sys
from pathlib import Path

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F


def read_safetensors(path):
    raw = Path(path).read_bytes()
    (header_length,) = struct.unpack('<Q', raw[:8])
    header = json.loads(raw[8:8 + header_length])
    start = 8 + header_length
    tensors = {}
    for name, entry in header.items():
        if name == '__metadata__':
            continue
        if entry['dtype'] != 'F32':
            raise ValueError(f'{path}: tensor {name} has dtype {entry["dtype"]}, expected F32')
        begin, end = entry['data_offsets']
        array = np.frombuffer(raw, dtype='<f4', count=(end - begin) // 4, offset=start + begin)
        tensors[name] = torch.from_numpy(array.reshape(entry['shape']).copy())
    return tensors


class GlobalAvgPool(nn.Module):
    def forward(self, x):
        return x.mean(dim=(2, 3))


class Linear(nn.Linear):
    """ft-train's linear takes any input shape flat."""

    def forward(self, x):
        return super().forward(x.flatten(1))


class Embedding(nn.Module):
    """Token plus position embedding of a window of context + 1 token ids (the last one only a target)."""

    def __init__(self, vocab, context, dim):
        super().__init__()
        self.context = context
        self.token = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(context, dim)

    def forward(self, x):
        tokens = x[:, :self.context].long()
        return self.token(tokens) + self.position(torch.arange(self.context, device=x.device))


class CausalAttention(nn.Module):
    """softmax(q k^T / sqrt(D)) v per head over positions up to each row's, from [B, T, 3C]."""

    def __init__(self, heads):
        super().__init__()
        self.heads = heads

    def forward(self, qkv):
        B, T, width = qkv.shape
        C = width // 3
        q, k, v = (t.view(B, T, self.heads, C // self.heads).transpose(1, 2) for t in qkv.split(C, dim=2))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / (C // self.heads) ** 0.5)
        mask = torch.ones(T, T, dtype=torch.bool, device=qkv.device).tril()
        att = F.softmax(scores.masked_fill(~mask, float('-inf')), dim=-1)
        return (att @ v).transpose(1, 2).contiguous().view(B, T, C)


class TiedHead(nn.Module):
    """Logits at every position from the embedding's token table (no parameters of its own)."""

    def __init__(self, embedding):
        super().__init__()
        self.embedding = [embedding]  # a list: the table stays the embedding's parameter alone

    def forward(self, x):
        return x @ self.embedding[0].token.weight.T


def build_layer(spec, in_shapes, model, earlier):
    kind, shape = spec['type'], in_shapes[0]
    sequence = len(shape) == 2
    if kind == 'conv':
        return nn.Conv2d(shape[0], spec['filters'], spec['kernel'], spec['stride'], spec['pad'])
    if kind == 'maxpool':
        return nn.MaxPool2d(spec['kernel'], spec['stride'], spec['pad'])
    if kind == 'avgpool':
        return nn.AvgPool2d(spec['kernel'], spec['stride'], spec['pad'], count_include_pad=True)
    if kind == 'linear':
        return nn.Linear(shape[1], spec['outputs']) if sequence else Linear(int(np.prod(shape)), spec['outputs'])
    if kind == 'relu':
        return nn.ReLU()
    if kind == 'flatten':
        return nn.Flatten()
    if kind == 'dropout':
        return nn.Dropout(spec['p'])
    if kind == 'batchnorm':
        norm = nn.BatchNorm2d if len(shape) == 3 else nn.BatchNorm1d
        return norm(shape[0], eps=spec['eps'], momentum=spec['momentum'])
    if kind == 'layernorm':
        return nn.LayerNorm([shape[1]] if sequence else list(shape), eps=spec['eps'])
    if kind == 'embedding':
        return Embedding(model['vocab'], model['context'], spec['dim'])
    if kind == 'attention':
        return CausalAttention(spec['heads'])
    if kind == 'gelu':
        return nn.GELU()
    if kind == 'lmhead':
        return TiedHead(earlier(spec['embedding']))
    if kind == 'globalavgpool':
        return GlobalAvgPool()
    if kind in ('add', 'concat'):
        return None
    raise ValueError(f'unknown layer type {kind}')


class SpecModel(nn.Module):
    """The spec's graph; the output is the last layer's."""

    def __init__(self, spec):
        super().__init__()
        self.layers = spec['layers']
        self.sources = []
        self.blocks = nn.ModuleList()
        self.language = 'context' in spec
        model_input = [spec['context'] + 1] if self.language else spec['input']
        index = {layer['name']: i for i, layer in enumerate(self.layers)}
        shapes = []
        for i, layer in enumerate(self.layers):
            names = layer.get('inputs')
            sources = [i - 1] if names is None else [-1 if n == 'input' else index[n] for n in names]
            in_shapes = [model_input if j < 0 else shapes[j] for j in sources]
            block = build_layer(layer, in_shapes, spec, lambda name: self.blocks[index[name]])
            self.sources.append(sources)
            self.blocks.append(block if block is not None else nn.Identity())
            shapes.append(self.out_shape(layer, block, in_shapes))

    @staticmethod
    def out_shape(layer, block, in_shapes):
        probe = [torch.zeros(1, *shape) for shape in in_shapes]
        with torch.no_grad():
            if layer['type'] == 'add':
                return list(in_shapes[0])
            if layer['type'] == 'concat':
                return list(torch.cat(probe, dim=1).shape[1:])
            block.eval()
            if layer['type'] == 'embedding':
                probe = [p.long() for p in probe]
            return list(block(probe[0]).shape[1:])

    def forward(self, x):
        outputs = []
        for layer, sources, block in zip(self.layers, self.sources, self.blocks):
            xs = [x if j < 0 else outputs[j] for j in sources]
            if layer['type'] == 'add':
                y = xs[0]
                for other in xs[1:]:
                    y = y + other
            elif layer['type'] == 'concat':
                y = torch.cat(xs, dim=1)
            else:
                y = block(xs[0])
            outputs.append(y)
        return outputs[-1]

    def load(self, tensors):
        """Copies every tensor by its ft-train name ("conv1.weight", "bn1.running_var", ...); all must be used."""
        used = set()
        for layer, block in zip(self.layers, self.blocks):
            for key, value in list(block.named_parameters()) + list(block.named_buffers()):
                if key == 'num_batches_tracked':
                    continue
                name = f'{layer["name"]}.{key}'
                if name not in tensors or tuple(tensors[name].shape) != tuple(value.shape):
                    raise ValueError(f'{name}: missing or of shape {tuple(tensors[name].shape) if name in tensors else None}, expected {tuple(value.shape)}')
                with torch.no_grad():
                    value.copy_(tensors[name])
                used.add(name)
        unused = set(tensors) - used
        if unused:
            raise ValueError(f'tensors no layer takes: {sorted(unused)}')


def main():
    model_dir, data_dir = Path(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)
    spec = json.loads((model_dir / 'model.json').read_text())
    model = SpecModel(spec)
    model.load(read_safetensors(model_dir / 'model.safetensors'))
    model.eval()
    features = np.load(data_dir / 'features.npy')
    divisor = np.float32(json.loads((data_dir / 'split.json').read_text())['divisor'])
    labels = torch.from_numpy(np.load(data_dir / 'labels.npy').astype(np.int64))
    correct, loss_sum = 0, 0.0
    context = spec.get('context')
    with torch.no_grad():
        for first in range(0, len(labels), 500):
            x = torch.from_numpy(features[first:first + 500].astype(np.float32) / divisor)
            logits = model(x)
            if context is None:
                y = labels[first:first + 500]
            else:  # every position's next token; per position, counted in samples' worth
                logits, y = logits.reshape(-1, spec['vocab']), x[:, 1:].reshape(-1).long()
            correct += int((logits.argmax(dim=1) == y).sum()) / (context or 1)
            loss_sum += float(F.cross_entropy(logits.double(), y, reduction='sum')) / (context or 1)
    samples = len(labels)
    print(json.dumps({'accuracy': correct / samples, 'loss': loss_sum / samples, 'correct': correct, 'samples': samples}))


if __name__ == '__main__':
    main()
