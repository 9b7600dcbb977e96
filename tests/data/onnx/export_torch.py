"""Exports the ONNX graphs in this folder with PyTorch's own exporter.

Run with Debian 12's python3-torch (1.13): `python3 export_torch.py OUT_DIR`.
The committed .onnx files are these exports with their weight data left out
by headroom's StripOnnxWeights (as `headroom fit --onnx` sends a graph); the
importer reads shapes only, so the results are the same. The three published
architectures (gpt2-small, bert-base, vit-b16) are committed gzip'd.
"""
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

torch.manual_seed(0)


class Block(nn.Module):
    """A GPT-2 block: pre-LayerNorm, fused QKV, causal mask, GELU (tanh)."""

    def __init__(self, d=256, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1 = nn.LayerNorm(d)
        self.qkv = nn.Linear(d, 3 * d)
        self.proj = nn.Linear(d, d)
        self.ln2 = nn.LayerNorm(d)
        self.fc = nn.Linear(d, 4 * d)
        self.out = nn.Linear(4 * d, d)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(c, dim=2)
        q = q.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        k = k.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        v = v.view(b, t, self.heads, c // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        mask = torch.tril(torch.ones(t, t, dtype=torch.bool))
        att = F.softmax(att.masked_fill(~mask, float("-inf")), dim=-1)
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class Gpt(nn.Module):
    """Two GPT-2 blocks, learned positions, LM head tied to the embedding."""

    def __init__(self, vocab=1000, positions=128, d=256, layers=2, heads=4):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(positions, d)
        self.blocks = nn.ModuleList([Block(d, heads) for _ in range(layers)])
        self.lnf = nn.LayerNorm(d)
        self.head = nn.Linear(d, vocab, bias=False)
        self.head.weight = self.wte.weight

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(0, idx.shape[1]))
        for block in self.blocks:
            x = block(x)
        return self.head(self.lnf(x))


class Cnn(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(3, 32, 3, padding=1)
        self.bn = nn.BatchNorm2d(32)
        self.fc = nn.Linear(32, 10)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.c1(x))).mean((2, 3)))


class Lstm(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(32, 64, num_layers=2, batch_first=True)
        self.fc = nn.Linear(64, 5)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.fc(y[:, -1])


class Bert(nn.Module):
    """BERT-base (BertModel): embeddings with position and token-type
    tables, post-LayerNorm encoder (GELU), pooler dense + tanh on [CLS]."""

    def __init__(self, vocab=30522, positions=512, d=768, heads=12, ffn=3072,
                 layers=12):
        super().__init__()
        self.words = nn.Embedding(vocab, d)
        self.positions = nn.Embedding(positions, d)
        self.token_types = nn.Embedding(2, d)
        self.norm = nn.LayerNorm(d, eps=1e-12)
        layer = nn.TransformerEncoderLayer(d, heads, ffn, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers,
                                             enable_nested_tensor=False)
        self.pooler = nn.Linear(d, d)

    def forward(self, ids):
        t = ids.shape[1]
        x = (self.words(ids) + self.positions(torch.arange(t)) +
             self.token_types(torch.zeros(t, dtype=torch.long)))
        x = self.encoder(self.norm(x))
        return torch.tanh(self.pooler(x[:, 0]))


class Vit(nn.Module):
    """ViT-B/16 (ViTModel): patch conv, class token, position table,
    pre-LayerNorm encoder (GELU), final LayerNorm, pooler dense + tanh."""

    def __init__(self, image=224, patch=16, d=768, heads=12, ffn=3072,
                 layers=12):
        super().__init__()
        self.patch = nn.Conv2d(3, d, patch, stride=patch)
        self.cls = nn.Parameter(torch.zeros(1, 1, d))
        self.pos = nn.Parameter(torch.zeros(1, (image // patch) ** 2 + 1, d))
        layer = nn.TransformerEncoderLayer(d, heads, ffn, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers,
                                             enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d)
        self.pooler = nn.Linear(d, d)

    def forward(self, pixels):
        x = self.patch(pixels).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls.expand(x.shape[0], -1, -1), x], dim=1)
        x = self.norm(self.encoder(x + self.pos))
        return torch.tanh(self.pooler(x[:, 0]))


def export(model, example, path, axes, **kwargs):
    torch.onnx.export(model, (example,), path, input_names=["x"],
                      output_names=["y"], dynamic_axes={"x": axes}, **kwargs)
    print(path, sum(p.numel() for p in model.parameters()), "parameters")


out = sys.argv[1] if len(sys.argv) > 1 else "."
# Without constant folding the tied head stays a Transpose of wte.
export(Gpt().eval(), torch.randint(0, 1000, (2, 128)), f"{out}/gpt-mini.onnx",
       {0: "batch", 1: "seq"}, opset_version=17, do_constant_folding=False)
# Opset 14 writes LayerNorm out in element-wise ops; the exporter keeps one
# copy of equal-valued parameters and reaches the others through Identity.
export(nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True).eval(),
       torch.randn(2, 64, 256), f"{out}/encoder-layer.onnx", {0: "batch"},
       opset_version=14)
export(Lstm().eval(), torch.randn(2, 50, 32), f"{out}/lstm-classifier.onnx",
       {0: "batch"}, opset_version=17)
# The published architectures of the three-ways test (three_ways_test.cc).
export(Gpt(vocab=50257, positions=1024, d=768, layers=12, heads=12).eval(),
       torch.randint(0, 50257, (1, 1024)), f"{out}/gpt2-small.onnx",
       {0: "batch", 1: "seq"}, opset_version=17, do_constant_folding=False)
export(Bert().eval(), torch.randint(0, 30522, (1, 512)),
       f"{out}/bert-base.onnx", {0: "batch"}, opset_version=17,
       do_constant_folding=False)
export(Vit().eval(), torch.randn(1, 3, 224, 224), f"{out}/vit-b16.onnx",
       {0: "batch"}, opset_version=17, do_constant_folding=False)
# Training mode keeps BatchNormalization (eval mode folds it into the conv).
export(Cnn().train(), torch.randn(2, 3, 32, 32), f"{out}/cnn-train.onnx",
       {0: "batch"}, opset_version=17, do_constant_folding=False,
       training=torch.onnx.TrainingMode.TRAINING)
