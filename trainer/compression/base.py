"""The codec interface, the sender's compression state, and the two codec shapes.

``Codec`` is the protocol every family implements (after hivemind's ``CompressionBase``):
``compress(tensors, state) -> Payload`` with error feedback, ``decompress(payload,
expected_shapes) -> tensors``, ``estimate_bytes(shapes)`` (exact encoded size, no compressing),
``ratio(payload)`` (measured). Two bases carry the shared work:

* ``PerTensorCodec`` (quantisation, top-k, low rank): one entry per tensor, parts per codec;
  a family says its ``part_specs(shape)``, ``encode_one`` and ``decode_parts``.
* ``FlatCodec`` (chunked top-k, stride): the tensors, sorted by name, flattened into ONE entry
  ``flat``; meta carries the model's ``layout``; a family says its ``flat_part_specs``,
  ``encode_flat`` and ``decode_flat``.

Error feedback: ``compress`` adds ``ef_decay * state.residual[name]`` to the input, encodes,
decodes exactly as a receiver would, and keeps ``residual = input + old_residual - decoded``,
so what a round drops is sent in later rounds. The residual lives in ``CompressionState``, not
in the codec, so a policy can switch codecs freely between rounds.
"""

from __future__ import annotations

import hashlib
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol, runtime_checkable

import torch

from abci_app.jobs.policy import CodecPolicy
from trainer.commit import KIND_UPDATE, Entry, Payload, PayloadError, encode

Shapes = dict[str, tuple[int, ...]]
PartSpecs = dict[str, tuple[torch.dtype, tuple]]


@dataclass(slots=True)
class CompressionState:
    residual: dict[str, torch.Tensor] = field(default_factory=dict)
    q_warm: dict[str, torch.Tensor] = field(default_factory=dict)  # PowerSGD Q per tensor
    error_feedback: bool = True
    ef_decay: float = 1.0  # residual <- decay * residual before it is added (SparseLoCo: 0.95)
    sent: int = 0  # payloads compressed so far (the stride codec's fragment counter)


@runtime_checkable
class Codec(Protocol):
    """What the trainer, the verifier and the policies use; one class per family implements it."""

    family: ClassVar[str]

    @property
    def quant(self) -> str: ...  # the values' quantizer: fp32 | fp16 | int8 | int4 | int2 | int1

    @property
    def name(self) -> str: ...  # the canonical policy string, also the payload's codec field

    @property
    def policy(self) -> CodecPolicy: ...

    @property
    def density(self) -> float: ...  # fraction of the values sent (for logs)

    def compress(self, tensors: dict[str, torch.Tensor], state: CompressionState) -> Payload: ...

    def decompress(
        self, payload: Payload, expected_shapes: Shapes | None = None
    ) -> dict[str, torch.Tensor]: ...

    def estimate_bytes(self, shapes: Shapes) -> int: ...

    def nominal_ratio(self, shapes: Shapes) -> float: ...

    def ratio(self, payload: Payload) -> float: ...


def check_parts(name: str, parts: dict[str, torch.Tensor], expected: PartSpecs) -> None:
    """The part names, dtypes and shapes are exactly the codec's."""
    if set(parts) != set(expected):
        raise PayloadError(f"parts {sorted(parts)} do not match codec {name}: {sorted(expected)}")
    for pn, (dt, ps) in expected.items():
        if parts[pn].dtype != dt or tuple(parts[pn].shape) != tuple(ps):
            raise PayloadError(
                f"part {pn}: {parts[pn].dtype}{tuple(parts[pn].shape)}, "
                f"expected {dt}{ps} (shape mismatch)"
            )


def zeros_like_specs(specs: PartSpecs) -> dict[str, torch.Tensor]:
    return {pn: torch.zeros(ps, dtype=dt) for pn, (dt, ps) in specs.items()}


def layout_id(shapes: Shapes) -> str:
    """16 hex digits of sha256 over the sorted ``name:d0xd1...`` lines (the flat codecs' meta)."""
    lines = "\n".join(f"{n}:{'x'.join(str(int(d)) for d in shapes[n])}" for n in sorted(shapes))
    return hashlib.sha256(lines.encode("utf-8")).hexdigest()[:16]


class CodecBase(ABC):
    """Name, payload checks and ratios shared by every family."""

    family: ClassVar[str]
    quant: str

    @classmethod
    @abstractmethod
    def from_policy(cls, p: CodecPolicy) -> CodecBase:
        """The codec of a parsed policy of this family."""

    @property
    @abstractmethod
    def policy(self) -> CodecPolicy:
        """The policy this codec runs (its ``canonical`` string is the codec's name)."""

    @property
    def name(self) -> str:
        return self.policy.canonical

    @property
    def density(self) -> float:
        return 1.0

    @abstractmethod
    def meta(self) -> dict[str, Any]: ...

    @abstractmethod
    def skeleton(self, shapes: Shapes) -> Payload:
        """A payload of the exact encoded size for tensors of these shapes (zero data)."""

    @abstractmethod
    def compress(self, tensors: dict[str, torch.Tensor], state: CompressionState) -> Payload: ...

    @abstractmethod
    def _decompress(
        self, payload: Payload, expected_shapes: Shapes | None
    ) -> dict[str, torch.Tensor]: ...

    def decompress(
        self, payload: Payload, expected_shapes: Shapes | None = None
    ) -> dict[str, torch.Tensor]:
        if payload.kind != KIND_UPDATE:
            raise PayloadError("not an update payload")
        if payload.codec != self.name:
            raise PayloadError(f"payload codec {payload.codec!r}, expected {self.name!r}")
        return self._decompress(payload, expected_shapes)

    def estimate_bytes(self, shapes: Shapes) -> int:
        """Exact encoded payload size for tensors of these shapes."""
        return len(encode(self.skeleton(shapes)))

    def nominal_ratio(self, shapes: Shapes) -> float:
        raw = 4 * sum(math.prod(s) for s in shapes.values())
        return raw / self.estimate_bytes(shapes)

    def ratio(self, payload: Payload) -> float:
        """Measured ratio: float32 bytes of the tensors / canonical encoded bytes."""
        raw = 4 * sum(math.prod(e.shape) for e in payload.entries.values())
        return raw / len(encode(payload))


class PerTensorCodec(CodecBase):
    """One entry per tensor (original dtype float32 and shape), parts per family."""

    @abstractmethod
    def part_specs(self, shape: tuple[int, ...]) -> PartSpecs: ...

    @abstractmethod
    def encode_one(
        self, name: str, g: torch.Tensor, state: CompressionState
    ) -> dict[str, torch.Tensor]: ...

    @abstractmethod
    def decode_parts(
        self, shape: tuple[int, ...], parts: dict[str, torch.Tensor]
    ) -> torch.Tensor: ...

    def decode_one(self, shape: tuple[int, ...], parts: dict[str, torch.Tensor]) -> torch.Tensor:
        check_parts(self.name, parts, self.part_specs(shape))
        return self.decode_parts(shape, parts)

    def skeleton(self, shapes: Shapes) -> Payload:
        entries = {
            name: Entry(
                dtype=torch.float32,
                shape=tuple(shape),
                parts=zeros_like_specs(self.part_specs(tuple(shape))),
            )
            for name, shape in shapes.items()
        }
        return Payload(kind=KIND_UPDATE, codec=self.name, meta=self.meta(), entries=entries)

    def compress(self, tensors: dict[str, torch.Tensor], state: CompressionState) -> Payload:
        entries: dict[str, Entry] = {}
        for name in sorted(tensors):
            t = tensors[name].detach().float().cpu()
            res = state.residual.get(name)
            g = (
                t + state.ef_decay * res
                if (state.error_feedback and res is not None)
                else t.clone()
            )
            parts = self.encode_one(name, g, state)
            dec = self.decode_one(tuple(t.shape), parts)
            if state.error_feedback:
                state.residual[name] = g - dec
            entries[name] = Entry(dtype=torch.float32, shape=tuple(t.shape), parts=parts)
        return Payload(kind=KIND_UPDATE, codec=self.name, meta=self.meta(), entries=entries)

    def _decompress(
        self, payload: Payload, expected_shapes: Shapes | None
    ) -> dict[str, torch.Tensor]:
        if payload.meta != self.meta():
            raise PayloadError(f"payload meta does not match codec {self.name}")
        if expected_shapes is not None:
            if set(payload.entries) != set(expected_shapes):
                raise PayloadError("update tensor names do not match the model")
            for n, e in payload.entries.items():
                if tuple(e.shape) != tuple(expected_shapes[n]):
                    raise PayloadError(
                        f"{n}: shape {e.shape} does not match model {expected_shapes[n]}"
                    )
        out = {}
        for name, e in payload.entries.items():
            if e.dtype != torch.float32:
                raise PayloadError(f"{name}: updates must be float32 tensors")
            t = self.decode_one(tuple(e.shape), e.parts)
            if not bool(torch.isfinite(t).all()):
                raise PayloadError(f"{name}: decoded update is not finite")
            out[name] = t
        return out


def flat_with_residual(tensors: dict[str, torch.Tensor], state: CompressionState) -> torch.Tensor:
    """All tensors in name order, flattened into one float32 vector, each plus its decayed
    error-feedback residual when error feedback is on."""
    gs = []
    for name in sorted(tensors):
        t = tensors[name].detach().float().cpu().reshape(-1)
        res = state.residual.get(name)
        gs.append(
            t + state.ef_decay * res.reshape(-1)
            if (state.error_feedback and res is not None)
            else t.clone()
        )
    return torch.cat(gs)


def store_residual(
    state: CompressionState, names: list[str], shapes: Shapes, flat: torch.Tensor, dec: torch.Tensor
) -> None:
    """Error feedback: what this round did not send, per tensor, carried to the next round."""
    if not state.error_feedback:
        return
    sizes = [math.prod(shapes[n]) for n in names]
    for name, r in zip(names, torch.split(flat - dec, sizes), strict=True):
        state.residual[name] = r.reshape(shapes[name])


class FlatCodec(CodecBase):
    """One entry ``flat`` (float32, (N,)): all tensors sorted by name, flattened. The receiver
    must know the model's shapes; meta carries their ``layout_id`` (a per-tensor table would
    cost ~80 bytes a tensor, more than the values of a small model at high compression)."""

    @abstractmethod
    def flat_part_specs(self, n: int, extra: dict[str, Any]) -> PartSpecs: ...

    @abstractmethod
    def encode_flat(
        self, flat: torch.Tensor, state: CompressionState
    ) -> tuple[dict[str, torch.Tensor], torch.Tensor, dict[str, Any]]:
        """(parts, decoded flat vector, extra meta)."""

    @abstractmethod
    def decode_flat(
        self, n: int, parts: dict[str, torch.Tensor], extra: dict[str, Any]
    ) -> torch.Tensor: ...

    def extra_meta(self, meta: dict[str, Any]) -> dict[str, Any]:
        """The payload-specific meta fields (checked); none by default."""
        return {}

    def skeleton_extra(self) -> dict[str, Any]:
        """The extra meta of the largest payload (what ``estimate_bytes`` measures)."""
        return {}

    def skeleton(self, shapes: Shapes) -> Payload:
        n = sum(math.prod(s) for s in shapes.values())
        extra = self.skeleton_extra()
        parts = zeros_like_specs(self.flat_part_specs(n, extra))
        meta = dict(self.meta(), layout=layout_id(shapes), **extra)
        return Payload(
            kind=KIND_UPDATE,
            codec=self.name,
            meta=meta,
            entries={"flat": Entry(dtype=torch.float32, shape=(n,), parts=parts)},
        )

    def compress(self, tensors: dict[str, torch.Tensor], state: CompressionState) -> Payload:
        names = sorted(tensors)
        flat = flat_with_residual(tensors, state)
        parts, dec, extra = self.encode_flat(flat, state)
        shapes = {n: tuple(tensors[n].shape) for n in names}
        store_residual(state, names, shapes, flat, dec)
        meta = dict(self.meta(), layout=layout_id(shapes), **extra)
        return Payload(
            kind=KIND_UPDATE,
            codec=self.name,
            meta=meta,
            entries={"flat": Entry(dtype=torch.float32, shape=(flat.numel(),), parts=parts)},
        )

    def _decompress(
        self, payload: Payload, expected_shapes: Shapes | None
    ) -> dict[str, torch.Tensor]:
        fam = self.family
        if expected_shapes is None:
            raise PayloadError(f"a {fam} payload can only be decoded with the model's shapes")
        extra = self.extra_meta(payload.meta)
        if payload.meta != dict(self.meta(), layout=layout_id(expected_shapes), **extra):
            raise PayloadError(f"{fam} payload meta (codec or model layout) does not match")
        if set(payload.entries) != {"flat"}:
            raise PayloadError(f"a {fam} payload has exactly one entry, 'flat'")
        e = payload.entries["flat"]
        names = sorted(expected_shapes)
        sizes = [math.prod(expected_shapes[nm]) for nm in names]
        n = sum(sizes)
        if e.dtype != torch.float32 or tuple(e.shape) != (n,):
            raise PayloadError(f"flat: {e.dtype}{tuple(e.shape)}, expected float32({n},)")
        check_parts(self.name, e.parts, self.flat_part_specs(n, extra))
        flat = self.decode_flat(n, e.parts, extra)
        if not bool(torch.isfinite(flat).all()):
            raise PayloadError("flat: decoded update is not finite")
        return {
            nm: t.reshape(expected_shapes[nm])
            for nm, t in zip(names, torch.split(flat, sizes), strict=True)
        }
