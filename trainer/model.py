"""A small GPT over bytes (nanoGPT-style: readable, shapes in comments).

B = batch, T = sequence length (<= block_size), C = n_embd, nh = n_head, hs = C // nh.
Vocabulary: the 256 byte values.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

from trainer.determinism import DetRNG


@dataclass(kw_only=True, slots=True)
class GPTConfig:
    """Model shape. Defaults: the benchmark's small model (~0.2 M parameters)."""

    block_size: int = 64  # context length T
    vocab_size: int = 256  # bytes
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0  # must stay 0 for verifiable re-execution

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> GPTConfig:
        return cls(**d)

    @classmethod
    def preset(cls, name: str) -> GPTConfig:
        """Named sizes: tiny (tests), small (benchmark default), medium, large."""
        presets = {
            "tiny": dict(block_size=32, n_layer=2, n_head=2, n_embd=32),
            "small": dict(block_size=64, n_layer=2, n_head=4, n_embd=64),
            "medium": dict(block_size=128, n_layer=4, n_head=4, n_embd=128),
            "large": dict(block_size=256, n_layer=6, n_head=6, n_embd=384),
        }
        if name not in presets:
            raise ValueError(f"unknown model size {name!r}: choose one of {sorted(presets)}")
        return cls(**presets[name])


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)  # 3 x (B, T, C)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, nh, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hs))  # (B, nh, T, T)
        mask = torch.ones(T, T, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = att @ v  # (B, nh, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x)))  # (B, T, C)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig) -> None:
        super().__init__()
        if cfg.dropout != 0.0:
            raise ValueError("dropout must be 0: verification re-executes steps exactly")
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.n_embd)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape  # (B, T) int64 byte values
        pos = torch.arange(T, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, C)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))  # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))
        return logits, loss

    def num_params(self) -> int:
        return sum(p.numel() for p in self.parameters())


def init_model(cfg: GPTConfig, seed: int = 0, device: str | torch.device = "cpu") -> GPT:
    """Build a GPT with weights drawn from a generator seeded by DetRNG("init", seed).

    The same (cfg, seed) gives the same initial model hash on the same stack.
    """
    s = DetRNG("model-init", seed).torch_seed()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(s)
        model = GPT(cfg)
        for name, p in model.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, mean=0.0, std=0.02)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
    return model.to(device)
