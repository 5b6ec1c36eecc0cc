"""Trainer state (parameters + inner AdamW state), model hash, inner steps and trace.

A trainer state is encoded with the canonical layout of trainer/commit.py, kind 2:
one entry per parameter (float32, its shape) with the parts ``param``, ``exp_avg``,
``exp_avg_sq``; meta = {"adam_step", "carry", "inner_step", "inner", "model", "round",
"shard"}. Before the first step AdamW's moments are stored as zeros, which is exactly what
AdamW would create, so a fresh and a loaded optimizer behave the same.

``shard`` is the data shard the chain assigned (``Participant.shard``) and ``carry`` the hex
sha256 of the error-feedback carry the round started with (trainer/carry.py): both are fixed
for a whole round, so every trace leaf commits to them. ``slices`` (only present when > 1) is
the number of equal slices a step's batch was split into (a provider's data-parallel island,
trainer/ddp.py): the step's gradient is the sum of the slices' mean gradients in slice order,
divided by their count; a single process computes the same bytes (``inner_step(slices=n)``), so
a verifier re-executes an island's segment alone, in exact mode too. ``microbatches`` (only
present beside ``slices``, both > 1: a data-parallel x pipeline-parallel island,
trainer/pipeline.py) splits each slice again into that many equal microbatches: the step's
gradient is then the sum over slices (in order) of each slice's microbatch gradients summed in
order, divided by slices x microbatches. A pipeline of one replica names ``slices`` = its
microbatch count alone (the same bytes: one level of slicing). A step draws no randomness but
its batch, a pure function of (ShardSpec, inner_step): ``inner_step`` is the RNG position.

A round that starts fresh starts from a state that is a function of public data (the base model,
the round, the shard, the configs, the island size): ``fresh_start_state`` builds its bytes from
the base model's with the same code, so a verifier checks trace entry 0 by its hash and never
fetches it (trainer/verify.py ``verify_fresh_start``).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass

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
        model.parameters(),
        lr=icfg.lr,
        betas=(icfg.beta1, icfg.beta2),
        eps=icfg.eps,
        weight_decay=icfg.weight_decay,
        foreach=False,
    )


def check_slices(slices: int, batch_size: int) -> None:
    """A batch splits into ``slices`` equal parts (1 <= slices <= batch size, a divisor)."""
    if not isinstance(slices, int) or isinstance(slices, bool) or slices < 1:
        raise ValueError(f"slices must be a positive int, got {slices!r}")
    if batch_size % slices:
        raise ValueError(f"batch size {batch_size} does not split into {slices} equal slices")


def check_microbatches(slices: int, microbatches: int, batch_size: int) -> None:
    """A batch splits into ``slices`` x ``microbatches`` equal parts; ``microbatches`` > 1 only
    beside ``slices`` > 1 (one level of slicing is named by ``slices`` alone)."""
    if type(microbatches) is not int or microbatches < 1:
        raise ValueError(f"microbatches must be a positive int, got {microbatches!r}")
    if microbatches > 1 and slices < 2:
        raise ValueError("microbatches > 1 needs slices > 1 (else name them as slices)")
    check_slices(slices, batch_size)
    check_slices(slices * microbatches, batch_size)


def sliced_grads(model: GPT, x, y, slices: int, microbatches: int = 1) -> float:
    """``param.grad`` = (g_0 + g_1 + ... + g_{n-1}) / n, g_r the mean-loss gradient of slice r
    (rows [r·B/n, (r+1)·B/n)), summed in slice order: what a data-parallel island's ranks reach
    with ``trainer.ddp``'s ordered all-gather hook, bit for bit on one stack. Returns the mean
    of the slices' losses.

    ``microbatches`` = m > 1: each slice r is split again into m microbatches, their gradients
    summed in order into G_r = (g_r0 + ... + g_r(m-1)), and ``param.grad`` =
    (G_0 + ... + G_{n-1}) / (n·m): what a data-parallel x pipeline-parallel island reaches
    (trainer/pipeline.py: each replica's pipeline accumulates its microbatches' gradients in
    order, the replicas' sums are added in rank order). With m = 1 this is the above."""
    check_microbatches(slices, microbatches, x.shape[0])
    n = slices * microbatches
    b = x.shape[0] // n
    params = [p for p in model.parameters() if p.requires_grad]
    acc: list[torch.Tensor] | None = None
    tot = 0.0
    for r in range(slices):
        part: list[torch.Tensor] | None = None
        for m in range(microbatches):
            i = r * microbatches + m
            for p in params:
                p.grad = None
            _, loss = model(x[i * b : (i + 1) * b], y[i * b : (i + 1) * b])
            loss.backward()
            tot += float(loss.detach())
            grads = [p.grad for p in params]
            if any(g is None for g in grads):
                raise ValueError("a parameter has no gradient (not in the loss)")
            if part is None:
                part = [g.clone() for g in grads if g is not None]
            else:
                for a, g in zip(part, grads, strict=True):
                    a.add_(g)  # type: ignore[arg-type]  # checked above
        assert part is not None
        if acc is None:
            acc = part
        else:
            for a, g in zip(acc, part, strict=True):
                a.add_(g)
    for a, p in zip(acc or [], params, strict=True):
        p.grad = a.div_(n)
    return tot / n


def inner_step(
    model: GPT,
    opt: torch.optim.Optimizer,
    x,
    y,
    icfg: InnerConfig,
    slices: int = 1,
    microbatches: int = 1,
) -> float:
    """One AdamW step on batch (x, y); returns the loss before the step. ``slices`` > 1: the
    gradient of a data-parallel island of that many ranks (``sliced_grads``), each slice split
    into ``microbatches`` (a pipeline-parallel island's)."""
    model.train()
    opt.zero_grad(set_to_none=True)
    if slices != 1:
        loss_v = sliced_grads(model, x, y, slices, microbatches)
        if icfg.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), icfg.grad_clip, foreach=False)
        opt.step()
        return loss_v
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
    model: GPT,
    opt: torch.optim.Optimizer,
    icfg: InnerConfig,
    *,
    round: int,
    inner_step: int,
    shard: int,
    carry: bytes = EMPTY_CARRY_HASH,
    slices: int = 1,
    microbatches: int = 1,
) -> Payload:
    return _state_payload(
        ((name, p, opt.state.get(p, {})) for name, p in model.named_parameters()),
        model.cfg,
        icfg,
        adam_step=_adam_step(opt),
        round=round,
        inner_step=inner_step,
        shard=shard,
        carry=carry,
        slices=slices,
        microbatches=microbatches,
    )


def _state_payload(
    params: Iterable[tuple[str, torch.Tensor, Mapping[str, torch.Tensor]]],
    cfg: GPTConfig,
    icfg: InnerConfig,
    *,
    adam_step: int,
    round: int,
    inner_step: int,
    shard: int,
    carry: bytes,
    slices: int,
    microbatches: int = 1,
) -> Payload:
    """The state of (name, parameter, its AdamW state) triples: what ``state_payload`` writes for
    a live model and optimizer, and ``fresh_start_state`` for a base model's bytes (a missing
    moment is stored as zeros, exactly what AdamW creates at its first step)."""
    entries: dict[str, Entry] = {}
    for name, p, st in params:
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
        "adam_step": int(adam_step),
        "carry": bytes(carry).hex(),
        "inner": icfg.to_dict(),
        "inner_step": int(inner_step),
        "model": cfg.to_dict(),
        "round": int(round),
        "shard": int(shard),
    }
    if slices != 1:  # absent for a single device: those states' bytes are unchanged
        meta["slices"] = int(slices)
    if microbatches != 1:  # a data-parallel x pipeline island's second level (slices > 1)
        if slices < 2:
            raise ValueError("microbatches > 1 needs slices > 1 (else name them as slices)")
        meta["microbatches"] = int(microbatches)
    return Payload(kind=KIND_STATE, codec="raw", meta=meta, entries=entries)


def state_bytes(
    model,
    opt,
    icfg,
    *,
    round: int,
    inner_step: int,
    shard: int,
    carry: bytes = EMPTY_CARRY_HASH,
    slices: int = 1,
    microbatches: int = 1,
) -> bytes:
    return encode(
        state_payload(
            model,
            opt,
            icfg,
            round=round,
            inner_step=inner_step,
            shard=shard,
            carry=carry,
            slices=slices,
            microbatches=microbatches,
        )
    )


def fresh_start_state(
    base: bytes | Payload,
    cfg: GPTConfig,
    icfg: InnerConfig,
    *,
    round: int,
    shard: int,
    slices: int = 1,
    microbatches: int = 1,
) -> bytes:
    """Trace entry 0 of a round that starts fresh from the model bytes ``base`` (kind 3: a job's
    initial model or an attested one, whose outer momentum is no part of a state): exactly the
    bytes a trainer writes before its first inner step (``state_bytes`` of the base loaded into
    ``cfg``'s model with a fresh AdamW: inner step 0, adam step 0, zero moments, the empty
    carry; the same ``_state_payload`` call), built from public data alone, without a model or
    an optimizer. ``slices`` is the only field the round's public record does not fix: a
    provider's data-parallel island names its size in every state (1 = a single device, no
    field), and a data-parallel x pipeline island also its ``microbatches`` per slice. A
    verifier checks sha256 of these bytes against the committed trace entry 0 instead of
    fetching it (trainer.verify.verify_challenge). PayloadError if ``base`` is not model bytes
    of ``cfg``."""
    p = base if isinstance(base, Payload) else decode(base, expected_kind=KIND_MODEL)
    if p.kind != KIND_MODEL:
        raise PayloadError("the base is not model bytes")
    if p.meta.get("model") != cfg.to_dict():
        raise PayloadError("the base model's config differs from the job's model")
    if type(slices) is not int or slices < 1:
        raise PayloadError(f"slices must be a positive int, got {slices!r}")
    if type(microbatches) is not int or microbatches < 1 or (microbatches > 1 and slices < 2):
        raise PayloadError(f"microbatches must be 1, or > 1 beside slices > 1: {microbatches!r}")
    params: list[tuple[str, torch.Tensor, Mapping[str, torch.Tensor]]] = []
    for name, e in p.entries.items():
        t = e.parts.get("param")
        if t is None or t.dtype != torch.float32 or tuple(t.shape) != tuple(e.shape):
            raise PayloadError(f"the base model's {name} has no float32 parameters")
        params.append((name, t, {}))
    return encode(
        _state_payload(
            params,
            cfg,
            icfg,
            adam_step=0,
            round=round,
            inner_step=0,
            shard=shard,
            carry=EMPTY_CARRY_HASH,
            slices=slices,
            microbatches=microbatches,
        )
    )


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
    slices: int = 1
    microbatches: int = 1

    def to_bytes(self, inner_step: int | None = None) -> bytes:
        """State bytes of the loaded model/optimizer (same round, shard, carry)."""
        return state_bytes(
            self.model,
            self.opt,
            self.icfg,
            round=self.round,
            shard=self.shard,
            carry=self.carry,
            inner_step=self.inner_step if inner_step is None else inner_step,
            slices=self.slices,
            microbatches=self.microbatches,
        )


def load_state(
    buf: bytes | Payload, device: str | torch.device = "cpu", into: LoadedState | None = None
) -> LoadedState:
    """Rebuild model + AdamW from state bytes (or their decoded Payload); raise PayloadError if
    malformed. Leaves the global torch RNG as it was. ``into``: a LoadedState of the same model
    and inner configs (e.g. the previous segment's, in ``verify_challenge``) whose model and
    optimizer are reused: every parameter is overwritten and the optimizer's state replaced,
    exactly as a fresh load sets them (gradients are cleared by every step), so the result is
    the same, without building the module again."""
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
        slices = p.meta.get("slices", 1)
        if "slices" in p.meta and (type(slices) is not int or slices < 2):
            raise ValueError(f"slices must be an int >= 2 when present, got {slices!r}")
        micro = p.meta.get("microbatches", 1)
        if "microbatches" in p.meta and (type(micro) is not int or micro < 2 or slices < 2):
            raise ValueError(
                f"microbatches must be an int >= 2 beside slices >= 2 when present, got {micro!r}"
            )
    except (KeyError, TypeError, ValueError) as exc:
        raise PayloadError(f"state meta is incomplete: {exc}") from None
    if (
        into is not None
        and into.model.cfg == cfg
        and into.icfg == icfg
        and next(into.model.parameters()).device == torch.device(device)
    ):
        model, opt = into.model, into.opt
        opt.state.clear()  # a fresh optimizer's state: filled below when adam_step > 0
        model.zero_grad(set_to_none=True)
    else:
        with torch.random.fork_rng(devices=[]):  # building the module draws an init we overwrite
            model = GPT(cfg).to(device)
        opt = make_inner_optimizer(model, icfg)
    named = dict(model.named_parameters())
    if set(named) != set(p.entries):
        raise PayloadError("state tensors do not match the model's parameter names")
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
    return LoadedState(
        model=model,
        opt=opt,
        icfg=icfg,
        round=rnd,
        inner_step=istep,
        shard=shard,
        carry=carry,
        adam_step=adam_step,
        slices=slices,
        microbatches=micro,
    )


def model_payload(
    model: GPT, momentum: dict[str, torch.Tensor] | None = None, outer: dict | None = None
) -> Payload:
    """Model bytes (kind 3): one entry per parameter with the part ``param``; with
    ``momentum`` (the outer Nesterov buffer, trainer.diloco.network_outer_step) also the part
    ``momentum``, and meta ``outer`` (the outer optimizer's settings)."""
    entries = {}
    for n, p in model.named_parameters():
        parts = {"param": p.detach().float().cpu()}
        if momentum is not None:
            parts["momentum"] = momentum[n].detach().float().cpu()
        entries[n] = Entry(dtype=torch.float32, shape=tuple(p.shape), parts=parts)
    meta: dict = {"model": model.cfg.to_dict()}
    if outer is not None:
        meta["outer"] = outer
    return Payload(kind=KIND_MODEL, codec="raw", meta=meta, entries=entries)


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


def params_hash_of_model(buf: bytes | Payload) -> bytes:
    """The *parameters hash* of model bytes: sha256 of their parameters-only canonical form
    (meta ``{"model": ...}``, part ``param``). For parameters-only bytes (a job's initial model)
    it is sha256 of the bytes themselves; for an attested model that carries the outer momentum
    it is what ``params_hash_of_state`` of a state starting from it gives, so the verifier ties
    trace entry 0 to the base model by this hash."""
    p = buf if isinstance(buf, Payload) else decode(buf, expected_kind=KIND_MODEL)
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
    slices: int = 1,
    microbatches: int = 1,
) -> tuple[list[float], list[bytes]]:
    """Run inner steps start_step..start_step+n_steps-1 on the spec's batches
    (``on_step(step, loss)`` after each, for progress; it must not touch the model).

    If ``trace_every`` > 0, returns the state hashes at every step s (start included)
    with (s - start_step) % trace_every == 0, and at the final step (states tagged with the
    spec's shard and ``carry``); ``keep_states`` (a list) also receives the state bytes.
    ``slices`` > 1: each step's gradient as a data-parallel island of that many ranks computes it
    (``sliced_grads``; the states record it), each slice split into ``microbatches`` (a
    data-parallel x pipeline island's).
    """
    check_microbatches(slices, microbatches, spec.batch_size)
    losses: list[float] = []
    trace: list[bytes] = []
    shard = spec.shard_index()

    def snap(s: int) -> None:
        b = state_bytes(
            model,
            opt,
            icfg,
            round=spec.round,
            inner_step=s,
            shard=shard,
            carry=carry,
            slices=slices,
            microbatches=microbatches,
        )
        trace.append(state_hash(b))
        if keep_states is not None:
            keep_states.append(b)

    for i in range(n_steps):
        s = start_step + i
        if trace_every and i % trace_every == 0:
            snap(s)
        x, y = corpus.batch(spec, s, device)
        losses.append(inner_step(model, opt, x, y, icfg, slices, microbatches))
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
