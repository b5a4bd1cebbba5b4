"""Tiny PyTorch re-implementations of torchvision's ResNet and Hugging Face's GPT-2 and BERT, with the
reference module names (HF GPT-2 with its transposed Conv1D), to compare the zoo's forward passes with
after weight conversion. Imported only where torch is installed; nothing is downloaded."""

from __future__ import annotations

import math

import numpy as np
import torch
import torch.nn.functional as TF
from torch import nn


def randomize_(module: nn.Module, seed: int = 0) -> nn.Module:
    """Give every parameter and BatchNorm statistic random values, so that a wrong mapping shows."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in module.named_parameters():
            p.copy_(
                torch.randn(p.shape, generator=g) * 0.2 + (1.0 if name.endswith(("bn1.weight", "bn2.weight")) else 0.0)
            )
        for name, b in module.named_buffers():
            if name.endswith("running_mean"):
                b.copy_(torch.randn(b.shape, generator=g) * 0.1)
            elif name.endswith("running_var"):
                b.copy_(torch.rand(b.shape, generator=g) + 0.5)
    return module


def numpy_state(module: nn.Module, drop_tied: tuple = ()) -> dict:
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items() if k not in drop_tied}


# -- torchvision ResNet ---------------------------------------------------------------------------
class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, cin, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(out)) + idt)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, cin, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, planes * 4, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(planes * 4)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        idt = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        return self.relu(self.bn3(self.conv3(out)) + idt)


class ResNet(nn.Module):
    """torchvision.models.ResNet, trimmed to what the tests need (stem 7x7 or 3x3)."""

    def __init__(self, block, layers, num_classes=10, width=64, stem_kernel=7):
        super().__init__()
        self.inplanes = width
        if stem_kernel == 7:
            self.conv1 = nn.Conv2d(3, width, 7, 2, 3, bias=False)
            self.maxpool = nn.MaxPool2d(3, 2, 1)
        else:
            self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
            self.maxpool = nn.Identity()
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, 2 * width, layers[1], 2)
        self.layer3 = self._make_layer(block, 4 * width, layers[2], 2)
        self.layer4 = self._make_layer(block, 8 * width, layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(8 * width * block.expansion, num_classes)

    def _make_layer(self, block, planes, blocks, stride=1):
        down = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            down = nn.Sequential(
                nn.Conv2d(self.inplanes, planes * block.expansion, 1, stride, bias=False),
                nn.BatchNorm2d(planes * block.expansion),
            )
        layers = [block(self.inplanes, planes, stride, down)]
        self.inplanes = planes * block.expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


# -- Hugging Face GPT-2 ---------------------------------------------------------------------------
class Conv1D(nn.Module):
    """transformers.pytorch_utils.Conv1D: a linear layer whose weight is stored (in, out)."""

    def __init__(self, nf, nx):
        super().__init__()
        self.nf = nf
        self.weight = nn.Parameter(torch.empty(nx, nf))
        self.bias = nn.Parameter(torch.zeros(nf))

    def forward(self, x):
        return torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight).reshape(*x.shape[:-1], self.nf)


def gelu_new(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class GPT2Attention(nn.Module):
    def __init__(self, d, n_head, n_pos):
        super().__init__()
        self.n_head = n_head
        self.register_buffer("bias", torch.tril(torch.ones(n_pos, n_pos, dtype=torch.bool)).view(1, 1, n_pos, n_pos))
        self.c_attn = Conv1D(3 * d, d)
        self.c_proj = Conv1D(d, d)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))
        w = q @ k.transpose(-1, -2) / math.sqrt(C // self.n_head)
        w = w.masked_fill(~self.bias[:, :, :T, :T], torch.finfo(w.dtype).min)
        y = torch.softmax(w, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class GPT2MLP(nn.Module):
    def __init__(self, d):
        super().__init__()
        self.c_fc = Conv1D(4 * d, d)
        self.c_proj = Conv1D(d, 4 * d)

    def forward(self, x):
        return self.c_proj(gelu_new(self.c_fc(x)))


class GPT2Block(nn.Module):
    def __init__(self, d, n_head, n_pos):
        super().__init__()
        self.ln_1 = nn.LayerNorm(d, eps=1e-5)
        self.attn = GPT2Attention(d, n_head, n_pos)
        self.ln_2 = nn.LayerNorm(d, eps=1e-5)
        self.mlp = GPT2MLP(d)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT2Model(nn.Module):
    """transformers.GPT2Model's module tree (state dict keys without a prefix, like the hub's files)."""

    def __init__(self, vocab, n_pos, n_layer, d, n_head):
        super().__init__()
        self.wte = nn.Embedding(vocab, d)
        self.wpe = nn.Embedding(n_pos, d)
        self.h = nn.ModuleList([GPT2Block(d, n_head, n_pos) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(d, eps=1e-5)

    def forward(self, idx):
        x = self.wte(idx) + self.wpe(torch.arange(idx.shape[1]))
        for b in self.h:
            x = b(x)
        return self.ln_f(x) @ self.wte.weight.T  # GPT2LMHeadModel's tied head


# -- Hugging Face BERT ----------------------------------------------------------------------------
class _Named(nn.Module):
    pass


def _lin_ln(h_in, h):
    m = _Named()
    m.dense = nn.Linear(h_in, h)
    m.LayerNorm = nn.LayerNorm(h, eps=1e-12)
    return m


class BertLayer(nn.Module):
    def __init__(self, h, n_head, inter):
        super().__init__()
        self.n_head = n_head
        self.attention = _Named()
        self.attention.self = _Named()
        for n in ("query", "key", "value"):
            setattr(self.attention.self, n, nn.Linear(h, h))
        self.attention.output = _lin_ln(h, h)
        self.intermediate = _Named()
        self.intermediate.dense = nn.Linear(h, inter)
        self.output = _lin_ln(inter, h)

    def forward(self, x, mask):
        B, T, C = x.shape
        s = self.attention.self
        q, k, v = (getattr(s, n)(x).view(B, T, self.n_head, -1).transpose(1, 2) for n in ("query", "key", "value"))
        w = q @ k.transpose(-1, -2) / math.sqrt(C // self.n_head) + mask
        y = (torch.softmax(w, -1) @ v).transpose(1, 2).reshape(B, T, C)
        o = self.attention.output
        x = o.LayerNorm(x + o.dense(y))
        o = self.output
        return o.LayerNorm(x + o.dense(TF.gelu(self.intermediate.dense(x))))


class BertModel(nn.Module):
    """transformers.BertModel's module tree; forward returns (sequence_output, pooled_output)."""

    def __init__(self, vocab, h, layers, n_head, inter, max_pos, types=2):
        super().__init__()
        self.embeddings = _Named()
        self.embeddings.word_embeddings = nn.Embedding(vocab, h, padding_idx=0)
        self.embeddings.position_embeddings = nn.Embedding(max_pos, h)
        self.embeddings.token_type_embeddings = nn.Embedding(types, h)
        self.embeddings.LayerNorm = nn.LayerNorm(h, eps=1e-12)
        self.encoder = _Named()
        self.encoder.layer = nn.ModuleList([BertLayer(h, n_head, inter) for _ in range(layers)])
        self.pooler = _Named()
        self.pooler.dense = nn.Linear(h, h)

    def forward(self, ids, attention_mask, token_type_ids):
        e = self.embeddings
        x = (
            e.word_embeddings(ids)
            + e.position_embeddings(torch.arange(ids.shape[1]))
            + e.token_type_embeddings(token_type_ids)
        )
        x = e.LayerNorm(x)
        mask = (1.0 - attention_mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
        for layer in self.encoder.layer:
            x = layer(x, mask)
        return x, torch.tanh(self.pooler.dense(x[:, 0]))


class BertForPreTraining(nn.Module):
    """transformers.BertForPreTraining's tree: ``bert.*``, ``cls.predictions.*`` (decoder tied),
    ``cls.seq_relationship``."""

    def __init__(self, vocab, h, layers, n_head, inter, max_pos):
        super().__init__()
        self.bert = BertModel(vocab, h, layers, n_head, inter, max_pos)
        self.cls = _Named()
        self.cls.predictions = _Named()
        self.cls.predictions.transform = _lin_ln(h, h)
        self.cls.predictions.bias = nn.Parameter(torch.zeros(vocab))
        self.cls.seq_relationship = nn.Linear(h, 2)

    def forward(self, ids, attention_mask, token_type_ids):
        x, pooled = self.bert(ids, attention_mask, token_type_ids)
        t = self.cls.predictions.transform
        x = t.LayerNorm(TF.gelu(t.dense(x)))
        return x @ self.bert.embeddings.word_embeddings.weight.T + self.cls.predictions.bias

    def hf_state(self) -> dict:
        """The state dict as HF writes it: with the tied decoder weight and bias under their own names."""
        sd = numpy_state(self)
        sd["cls.predictions.decoder.weight"] = sd["bert.embeddings.word_embeddings.weight"].copy()
        sd["cls.predictions.decoder.bias"] = sd["cls.predictions.bias"].copy()
        return sd


def to_numpy(t) -> np.ndarray:
    return t.detach().numpy()
