"""Trainer state (parameters + inner AdamW state), model hash, inner steps and trace.

A trainer state is encoded with the canonical layout of trainer/commit.py, kind 2:
one entry per parameter (float32, its shape) with the parts ``param``, ``exp_avg``,
``exp_avg_sq``; meta = {"adam_step", "carry", "inner_step", "inner", "model", "round",
"shard"}. Before the first step AdamW's moments are stored as zeros, which is exactly what
AdamW would create, so a fresh and a loaded optimizer behave the same.

``shard`` is the data shard the chain assigned (``Participant.shard``) and ``carry`` the hex
sha256 of the error-feedback carry the round started with (trainer/carry.py): both are fixed
for a whole round, so every trace leaf commits to them. A step draws no randomness but its
batch, a pure function of (ShardSpec, inner_step): ``inner_step`` is the RNG position.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from typing import Callable

import torch

from trainer.carry import EMPTY_CARRY_HASH
from trainer.commit import KIND_MODEL, KIND_STATE, Entry, Payload, PayloadError, decode, encode
from trainer.data import Corpus, ShardSpec
from trainer.model import GPT, GPTConfig


@dataclass(kw_only=True, slots=True)
class InnerConfig:
    """Inner optimizer (AdamW) hyperparameters, pinned per job."""

    lr: float = 3e-3
    beta1: float = 0.9
    beta2: float = 0.95
    eps: float = 1e-8
    weight_decay: float = 0.1
    grad_clip: float = 1.0  # 0 disables clipping

    def to_dict(self) -> dict:
        return asdict(self)


def make_inner_optimizer(model: GPT, icfg: InnerConfig) -> torch.optim.AdamW:
    # foreach=False: the plain per-tensor loop, identical on every device type
    return torch.optim.AdamW(
        model.parameters(), lr=icfg.lr, betas=(icfg.beta1, icfg.beta2), eps=icfg.eps,
        weight_decay=icfg.weight_decay, foreach=False,
    )


def inner_step(model: GPT, opt: torch.optim.Optimizer, x, y, icfg: InnerConfig) -> float:
    """One AdamW step on batch (x, y); returns the loss before the step."""
    model.train()
    opt.zero_grad(set_to_none=True)
    _, loss = model(x, y)
    loss.backward()
    if icfg.grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), icfg.grad_clip, foreach=False)
    opt.step()
    return float(loss.detach())


def _adam_step(opt: torch.optim.Optimizer) -> int:
    for st in opt.state.values():
        if "step" in st:
            return int(st["step"])
    return 0


def state_payload(
    model: GPT, opt: torch.optim.Optimizer, icfg: InnerConfig, *, round: int, inner_step: int,
    shard: int, carry: bytes = EMPTY_CARRY_HASH,
) -> Payload:
    entries: dict[str, Entry] = {}
    for name, p in model.named_parameters():
        st = opt.state.get(p, {})
        z = torch.zeros_like(p, memory_format=torch.contiguous_format)
        entries[name] = Entry(
            dtype=torch.float32,
            shape=tuple(p.shape),
            parts={
                "param": p.detach().float().cpu(),
                "exp_avg": st.get("exp_avg", z).detach().float().cpu(),
                "exp_avg_sq": st.get("exp_avg_sq", z).detach().float().cpu(),
            },
        )
    if len(carry) != 32:
        raise ValueError("carry must be the 32-byte sha256 of the carry bytes")
    meta = {
        "adam_step": _adam_step(opt),
        "carry": bytes(carry).hex(),
        "inner": icfg.to_dict(),
        "inner_step": int(inner_step),
        "model": model.cfg.to_dict(),
        "round": int(round),
        "shard": int(shard),
    }
    return Payload(kind=KIND_STATE, codec="raw", meta=meta, entries=entries)


def state_bytes(model, opt, icfg, *, round: int, inner_step: int, shard: int,
                carry: bytes = EMPTY_CARRY_HASH) -> bytes:
    return encode(state_payload(model, opt, icfg, round=round, inner_step=inner_step, shard=shard,
                                carry=carry))


def state_hash(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


@dataclass(slots=True)
class LoadedState:
    model: GPT
    opt: torch.optim.AdamW
    icfg: InnerConfig
    round: int
    inner_step: int
    shard: int = 0
    carry: bytes = EMPTY_CARRY_HASH
    adam_step: int = 0

    def to_bytes(self, inner_step: int | None = None) -> bytes:
        """State bytes of the loaded model/optimizer (same round, shard, carry)."""
        return state_bytes(self.model, self.opt, self.icfg, round=self.round, shard=self.shard,
                           carry=self.carry,
                           inner_step=self.inner_step if inner_step is None else inner_step)


def load_state(buf: bytes | Payload, device: str | torch.device = "cpu") -> LoadedState:
    """Rebuild model + AdamW from state bytes (or their decoded Payload); raise PayloadError if
    malformed. Leaves the global torch RNG as it was."""
    p = buf if isinstance(buf, Payload) else decode(buf, expected_kind=KIND_STATE)
    if p.kind != KIND_STATE:
        raise PayloadError("not a trainer state")
    try:
        cfg = GPTConfig.from_dict(p.meta["model"])
        icfg = InnerConfig(**p.meta["inner"])
        adam_step = int(p.meta["adam_step"])
        rnd, istep = int(p.meta["round"]), int(p.meta["inner_step"])
        shard = int(p.meta["shard"])
        carry = bytes.fromhex(p.meta["carry"])
        if len(carry) != 32:
            raise ValueError("carry is not a 32-byte hash")
    except (KeyError, TypeError, ValueError) as exc:
        raise PayloadError(f"state meta is incomplete: {exc}") from None
    with torch.random.fork_rng(devices=[]):  # building the module draws an init we overwrite
        model = GPT(cfg).to(device)
    named = dict(model.named_parameters())
    if set(named) != set(p.entries):
        raise PayloadError("state tensors do not match the model's parameter names")
    opt = make_inner_optimizer(model, icfg)
    with torch.no_grad():
        for name, param in named.items():
            e = p.entries[name]
            if set(e.parts) != {"param", "exp_avg", "exp_avg_sq"}:
                raise PayloadError(f"{name}: state entry needs param/exp_avg/exp_avg_sq")
            for part in e.parts.values():
                if tuple(part.shape) != tuple(param.shape) or part.dtype != torch.float32:
                    raise PayloadError(f"{name}: shape/dtype mismatch with the model")
            param.copy_(e.parts["param"])
            if adam_step > 0:
                opt.state[param] = {
                    "step": torch.tensor(float(adam_step)),
                    "exp_avg": e.parts["exp_avg"].clone().to(device),
                    "exp_avg_sq": e.parts["exp_avg_sq"].clone().to(device),
                }
    return LoadedState(model=model, opt=opt, icfg=icfg, round=rnd, inner_step=istep, shard=shard,
                       carry=carry, adam_step=adam_step)


def model_payload(model: GPT) -> Payload:
    entries = {
        n: Entry(dtype=torch.float32, shape=tuple(p.shape), parts={"param": p.detach().float().cpu()})
        for n, p in model.named_parameters()
    }
    return Payload(kind=KIND_MODEL, codec="raw", meta={"model": model.cfg.to_dict()}, entries=entries)


def model_hash(model: GPT) -> bytes:
    """sha256 of the canonical parameter bytes (the chain's model hash)."""
    return hashlib.sha256(encode(model_payload(model))).digest()


def params_hash_of_state(buf: bytes | Payload) -> bytes:
    """Model hash of the parameters inside a state (to tie a state to a base model)."""
    p = buf if isinstance(buf, Payload) else decode(buf, expected_kind=KIND_STATE)
    entries = {
        n: Entry(dtype=e.dtype, shape=e.shape, parts={"param": e.parts["param"]})
        for n, e in p.entries.items()
    }
    mp = Payload(kind=KIND_MODEL, codec="raw", meta={"model": p.meta["model"]}, entries=entries)
    return hashlib.sha256(encode(mp)).digest()


def run_inner_steps(
    model: GPT,
    opt: torch.optim.Optimizer,
    icfg: InnerConfig,
    corpus: Corpus,
    spec: ShardSpec,
    start_step: int,
    n_steps: int,
    *,
    trace_every: int = 0,
    device: str | torch.device = "cpu",
    carry: bytes = EMPTY_CARRY_HASH,
    keep_states: list[bytes] | None = None,
    on_step: Callable[[int, float], None] | None = None,
) -> tuple[list[float], list[bytes]]:
    """Run inner steps start_step..start_step+n_steps-1 on the spec's batches
    (``on_step(step, loss)`` after each, for progress; it must not touch the model).

    If ``trace_every`` > 0, returns the state hashes at every step s (start included)
    with (s - start_step) % trace_every == 0, and at the final step (states tagged with the
    spec's shard and ``carry``); ``keep_states`` (a list) also receives the state bytes.
    """
    losses: list[float] = []
    trace: list[bytes] = []
    shard = spec.shard_index()

    def snap(s: int) -> None:
        b = state_bytes(model, opt, icfg, round=spec.round, inner_step=s, shard=shard, carry=carry)
        trace.append(state_hash(b))
        if keep_states is not None:
            keep_states.append(b)

    for i in range(n_steps):
        s = start_step + i
        if trace_every and i % trace_every == 0:
            snap(s)
        x, y = corpus.batch(spec, s, device)
        losses.append(inner_step(model, opt, x, y, icfg))
        if on_step is not None:
            on_step(s, losses[-1])
    if trace_every:
        snap(start_step + n_steps)
    return losses, trace


@torch.no_grad()
def evaluate(model: GPT, batches) -> float:
    """Mean cross-entropy (nats) over the given batches."""
    model.eval()
    tot, n = 0.0, 0
    for x, y in batches:
        _, loss = model(x, y)
        tot += float(loss) * x.shape[0]
        n += x.shape[0]
    return tot / n
