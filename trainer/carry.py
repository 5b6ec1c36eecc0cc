"""The error-feedback carry: what a provider's compression state holds between rounds.

An update payload is ``compress(θ_base − θ_H + e_prev)``: it depends on the trace's last
state θ_H *and* on the residual ``e_prev`` that error feedback carried from the provider's
previous round (plus, for the low-rank codec, its warm-started Q, and for the strided codec
the count of payloads sent). That carry is part of what a provider commits:

* **carry bytes** = canonical layout v1 (trainer/commit.py), kind 4 (``KIND_CARRY``): one
  entry per tensor name with a carried residual, parts ``residual`` (float32, the tensor's
  shape) and, when present, ``q_warm`` (float32 (cols, r)); meta ``{"sent": n}``.
  A fresh provider's carry has no entries and ``sent`` 0: ``EMPTY_CARRY_HASH``.
* **carry hash** = sha256(carry bytes). Every trainer state of a round carries the hex hash of
  the carry the round *started* with (meta ``carry``), so the trace leaves commit to it, and the
  payload segment of a challenge can recompute the payload from (θ_base, θ_H, carry).
* **carry out** = what the next round starts with: ``carry_after(...)`` computes it from the
  committed payload (residual = θ_base − θ_H + decay·e_prev − decode(payload), element-wise, so
  it is the same on every IEEE-754 stack), and the next round's start state must name its hash.

ef_decay and error_feedback are job settings, not carried state: pass them when loading.
"""

from __future__ import annotations

import hashlib

import torch

from trainer.commit import KIND_CARRY, KIND_UPDATE, Entry, Payload, PayloadError, decode, encode
from trainer.compression import CompressionState, codec_from_payload


def carry_payload(state: CompressionState) -> Payload:
    entries: dict[str, Entry] = {}
    for name in sorted(set(state.residual) | set(state.q_warm)):
        parts: dict[str, torch.Tensor] = {}
        shape: tuple[int, ...] = ()
        if name in state.residual:
            r = state.residual[name].detach().float().cpu().contiguous()
            parts["residual"] = r
            shape = tuple(r.shape)
        if name in state.q_warm:
            parts["q_warm"] = state.q_warm[name].detach().float().cpu().contiguous()
            shape = shape or tuple(parts["q_warm"].shape)
        entries[name] = Entry(dtype=torch.float32, shape=shape, parts=parts)
    return Payload(kind=KIND_CARRY, codec="carry", meta={"sent": int(state.sent)}, entries=entries)


def carry_bytes(state: CompressionState) -> bytes:
    """Canonical bytes of a compression state's carried part (residuals, warm Q, sent)."""
    return encode(carry_payload(state))


def carry_hash(state_or_bytes: CompressionState | bytes) -> bytes:
    b = (
        state_or_bytes
        if isinstance(state_or_bytes, (bytes, bytearray))
        else carry_bytes(state_or_bytes)
    )
    return hashlib.sha256(bytes(b)).digest()


EMPTY_CARRY_HASH: bytes = carry_hash(CompressionState())


def load_carry(
    buf: bytes, *, ef_decay: float = 1.0, error_feedback: bool = True
) -> CompressionState:
    """A CompressionState from carry bytes; raise PayloadError if malformed."""
    p = decode(buf, expected_kind=KIND_CARRY)
    sent = p.meta.get("sent")
    if set(p.meta) != {"sent"} or not isinstance(sent, int) or isinstance(sent, bool) or sent < 0:
        raise PayloadError('carry meta must be {"sent": n >= 0}')
    st = CompressionState(error_feedback=error_feedback, ef_decay=ef_decay, sent=sent)
    for name, e in p.entries.items():
        if not set(e.parts) or not set(e.parts) <= {"residual", "q_warm"}:
            raise PayloadError(f"carry entry {name}: parts must be residual and/or q_warm")
        for t in e.parts.values():
            if t.dtype != torch.float32:
                raise PayloadError(f"carry entry {name}: float32 parts only")
        if "residual" in e.parts:
            if tuple(e.parts["residual"].shape) != tuple(e.shape):
                raise PayloadError(f"carry entry {name}: residual shape differs from the entry's")
            st.residual[name] = e.parts["residual"].clone()
        if "q_warm" in e.parts:
            st.q_warm[name] = e.parts["q_warm"].clone()
    return st


def carry_after(
    delta: dict[str, torch.Tensor],
    carry_in: CompressionState,
    payload_bytes: bytes,
    shapes: dict[str, tuple[int, ...]],
) -> CompressionState:
    """The carry a round leaves, from its committed payload: residual = delta + decay·e_prev −
    decode(payload) per tensor (element-wise only), ``sent`` + 1. ``q_warm`` (low-rank codec) is
    taken from a re-compression, so it is exact-mode only; other codecs carry no Q."""
    payload = decode(payload_bytes, expected_kind=KIND_UPDATE)
    codec = codec_from_payload(payload)
    dec = codec.decompress(payload, shapes)
    out = CompressionState(
        error_feedback=carry_in.error_feedback, ef_decay=carry_in.ef_decay, sent=carry_in.sent + 1
    )
    if codec.family == "lowrank":
        tmp = CompressionState(
            error_feedback=carry_in.error_feedback,
            ef_decay=carry_in.ef_decay,
            residual=dict(carry_in.residual),
            q_warm=dict(carry_in.q_warm),
        )
        codec.compress(delta, tmp)
        out.q_warm = tmp.q_warm
    if not carry_in.error_feedback:
        return out
    for name in sorted(delta):
        t = delta[name].detach().float().cpu()
        res = carry_in.residual.get(name)
        g = t + carry_in.ef_decay * res if res is not None else t.clone()
        out.residual[name] = g - dec[name]
    return out
