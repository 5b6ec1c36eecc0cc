"""The compression policy grammar: ONE parser, used by the chain's job-spec check (MsgCreateJob,
code 517) and by the trainer's codec registry (trainer/compression/registry.py), so every policy
the chain accepts is one the trainer runs, and the other way round.

Grammar (the canonical form; the only spelling the chain and ``parse_policy`` accept)::

    policy     = codec | adaptive
    codec      = sparsifier [ "+" quant ]                 no quant: fp32 values
    sparsifier = "dense"                                  every value
               | "topk:" DENSITY                          per tensor, ceil(D * n) largest |values|
               | "lowrank:" R                             PowerSGD rank R
               | "chunk:" K "/" C                         K largest |values| per chunk of C
               | "tchunk:" K "/" C                        the same, chunks within each tensor
               | "stride:" F                              fragment t mod F of the flat update
    quant      = "fp16" | "int8" | "int4"                 every family
               | "int2"                                   dense, chunk, tchunk and stride only
               | "int1"                                   stride only
    adaptive   = "adaptive" [ ":" BYTES ] [ "/" ladder ]  a codec per round within BYTES per round
    ladder     = "topk" [ "+" quant ] | "chunk" | "stride-chunk"     no ladder: "topk+int4"

Numbers are exact, never floats: R, K, C, F, BYTES are decimal integers without leading zeros
(R 1..2^20; 1 <= K <= C, C 2..2^20; F 1..2^20; BYTES 1..2^40; no BYTES: the trainer's default,
1/500 of the model's float32 bytes). DENSITY is an exact decimal in (0, 1]: ``1`` or ``0.``
followed by at most 18 digits, the last one not 0 (``0.01``, ``0.0625``); the trainer keeps
k = ceil(D * n) computed in integers. A policy is at most 64 characters of ``[a-z0-9:/+.-]``.

Friendlier spellings (CLI input) are mapped to the canonical form by ``canonical_policy``:
surrounding blanks and upper case, the names ``none``/``fp32`` (= ``dense``), ``fp16``, ``int2``,
``int8``, ``int4`` (= ``dense+int8`` ...), ``+fp32``, ``chunk:K`` (= ``chunk:K/4096``), decimals
such as ``.01``, ``0.010``, ``1e-2``, ``1.0``, integers with leading zeros, ``stride>chunk``
and ``/topk+int4``. The chain never rewrites a signed spec: a non-canonical policy is refused
(reason ``not_canonical``) with the canonical spelling in the message.

Errors: ``PolicyError`` (a ValueError) with a stable ``reason``: ``empty``, ``too_long``,
``charset``, ``unknown``, ``number``, ``range``, ``quantizer``, ``not_canonical``.
Pure and deterministic: integers and strings only, no floats, no I/O.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MAX_POLICY_LEN = 64
MAX_DECIMALS = 18
MAX_RANK = 1 << 20
MAX_CHUNK = 1 << 20
MAX_STRIDE = 1 << 20
MAX_BUDGET_BYTES = 1 << 40
DEFAULT_CHUNK = 4096
QUANTS = ("fp32", "fp16", "int8", "int4", "int2", "int1")
FAMILY_QUANTS = {
    "dense": ("fp32", "fp16", "int8", "int4", "int2"),
    "topk": ("fp32", "fp16", "int8", "int4"),
    "lowrank": ("fp32", "fp16", "int8", "int4"),
    "chunk": ("fp32", "fp16", "int8", "int4", "int2"),
    "tchunk": ("fp32", "fp16", "int8", "int4", "int2"),
    "stride": ("fp32", "fp16", "int8", "int4", "int2", "int1"),
}
LADDERS = ("topk", "chunk", "stride-chunk")
ADAPTIVE_DEFAULT_QUANT = "int4"  # the topk ladder's values when the policy names no ladder
REASONS = (
    "empty",
    "too_long",
    "charset",
    "unknown",
    "number",
    "range",
    "quantizer",
    "not_canonical",
)
FORMS = (
    "dense[+q], topk:D[+q], lowrank:R[+q], chunk:K/C[+q], tchunk:K/C[+q], stride:F[+q] or "
    "adaptive[:BYTES][/topk[+q]|/chunk|/stride-chunk] (q = fp16|int8|int4, int2 for dense, "
    "chunk, tchunk and stride, int1 for stride; no q = fp32; D an exact decimal in (0, 1], e.g. "
    "0.01)"
)

_CHARSET = re.compile(r"^[a-z0-9:/+.-]+$")
_INT = re.compile(r"^(0|[1-9][0-9]{0,15})$")
_DENSITY = re.compile(rf"^(1|0\.[0-9]{{0,{MAX_DECIMALS - 1}}}[1-9])$")


class PolicyError(ValueError):
    """A compression policy that is not in the grammar; ``reason`` is stable (see REASONS)."""

    def __init__(self, reason: str, why: str) -> None:
        super().__init__(why)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class Density:
    """An exact decimal fraction units / 10**scale in (0, 1] (canonical: no trailing zero)."""

    units: int
    scale: int

    @property
    def text(self) -> str:
        if self.scale == 0:
            return str(self.units)
        digits = str(self.units).rjust(self.scale, "0")
        return "0." + digits

    def ceil_times(self, n: int) -> int:
        """ceil(D * n), exactly."""
        return -(-self.units * n // 10**self.scale)

    def half(self) -> Density:
        """D / 2 (exact: one more decimal)."""
        return Density(self.units * 5, self.scale + 1)

    def at_least(self, other: Density) -> bool:
        return self.units * 10**other.scale >= other.units * 10**self.scale


@dataclass(frozen=True, slots=True)
class CodecPolicy:
    """One codec: ``family`` (dense|topk|lowrank|chunk|stride), ``quant`` and its numbers."""

    family: str
    quant: str = "fp32"
    density: Density | None = None  # topk
    rank: int = 0  # lowrank
    chunk_k: int = 0  # chunk, tchunk
    chunk_size: int = 0  # chunk, tchunk
    stride: int = 0  # stride

    @property
    def canonical(self) -> str:
        f = self.family
        if f == "topk":
            assert self.density is not None
            s = f"topk:{self.density.text}"
        elif f == "lowrank":
            s = f"lowrank:{self.rank}"
        elif f in ("chunk", "tchunk"):
            s = f"{f}:{self.chunk_k}/{self.chunk_size}"
        elif f == "stride":
            s = f"stride:{self.stride}"
        else:
            s = "dense"
        return s if self.quant == "fp32" else f"{s}+{self.quant}"


@dataclass(frozen=True, slots=True)
class AdaptiveSpec:
    """``adaptive``: the trainer picks a codec of ``ladder`` per round within ``budget_bytes``
    (0: the trainer's default budget); ``quant`` is the topk ladder's value quantizer."""

    budget_bytes: int = 0
    ladder: str = "topk"
    quant: str = ADAPTIVE_DEFAULT_QUANT

    @property
    def canonical(self) -> str:
        s = "adaptive" if not self.budget_bytes else f"adaptive:{self.budget_bytes}"
        if self.ladder == "topk":
            if self.quant == ADAPTIVE_DEFAULT_QUANT:
                return s
            return f"{s}/topk" if self.quant == "fp32" else f"{s}/topk+{self.quant}"
        return f"{s}/{self.ladder}"


Policy = CodecPolicy | AdaptiveSpec


def _show(text: str) -> str:
    return repr(text[: MAX_POLICY_LEN + 8])


def _int(s: str, what: str, lo: int, hi: int) -> int:
    if not _INT.match(s):
        raise PolicyError(
            "number", f"{what} must be a decimal integer without leading zeros, got {_show(s)}"
        )
    v = int(s)
    if not lo <= v <= hi:
        raise PolicyError("range", f"{what} must be {lo}..{hi}, got {v}")
    return v


def _density(s: str) -> Density:
    if not _DENSITY.match(s):
        raise PolicyError(
            "number",
            f"topk density must be 1 or 0.<digits> (at most "
            f"{MAX_DECIMALS}, no trailing 0), in (0, 1], got {_show(s)}",
        )
    if s == "1":
        return Density(1, 0)
    frac = s[2:]
    return Density(int(frac), len(frac))


def _quant(q: str, family: str, where: str) -> str:
    if q not in QUANTS[1:]:
        raise PolicyError(
            "quantizer",
            f"unknown quantizer {_show(q)} in {where}: "
            "fp16, int8, int4, int2 (dense, chunk, tchunk, stride), int1 (stride)",
        )
    if q not in FAMILY_QUANTS[family]:
        raise PolicyError(
            "quantizer",
            f"quantizer {q} does not go with {family} in {where}: "
            f"use one of {', '.join(FAMILY_QUANTS[family][1:])}",
        )
    return q


def _codec(text: str) -> CodecPolicy:
    base, plus, q = text.partition("+")
    family, colon, arg = base.partition(":")
    if family not in FAMILY_QUANTS:
        raise PolicyError("unknown", f"unknown compression {_show(text)}: use {FORMS}")
    quant = _quant(q, family, _show(text)) if plus else "fp32"
    if family == "dense":
        if colon:
            raise PolicyError("unknown", f"dense takes no argument in {_show(text)}")
        return CodecPolicy("dense", quant)
    if not colon:
        raise PolicyError("unknown", f"{family} needs an argument in {_show(text)}: use {FORMS}")
    if family == "topk":
        return CodecPolicy("topk", quant, density=_density(arg))
    if family == "lowrank":
        return CodecPolicy("lowrank", quant, rank=_int(arg, "lowrank rank R", 1, MAX_RANK))
    if family == "stride":
        return CodecPolicy("stride", quant, stride=_int(arg, "stride F", 1, MAX_STRIDE))
    k_s, slash, c_s = arg.partition("/")
    if not slash:
        raise PolicyError("unknown", f"{family} is written {family}:K/C, got {_show(text)}")
    c = _int(c_s, "chunk size C", 2, MAX_CHUNK)
    k = _int(k_s, "chunk K", 1, c)
    return CodecPolicy(family, quant, chunk_k=k, chunk_size=c)


def _adaptive(text: str) -> AdaptiveSpec:
    head, slash, ladder = text.partition("/")
    name, colon, budget_s = head.partition(":")
    if name != "adaptive":
        raise PolicyError("unknown", f"unknown compression {_show(text)}: use {FORMS}")
    budget = _int(budget_s, "adaptive BYTES", 1, MAX_BUDGET_BYTES) if colon else 0
    if not slash:
        return AdaptiveSpec(budget)
    name, plus, q = ladder.partition("+")
    if name not in LADDERS:
        raise PolicyError(
            "unknown", f"unknown adaptive ladder {_show(ladder)}: topk[+q], chunk or stride-chunk"
        )
    if plus and name != "topk":
        raise PolicyError(
            "quantizer", f"the {name} ladder chooses its own quantizer: write /{name} alone"
        )
    quant = _quant(q, "topk", _show(text)) if plus else "fp32"
    return AdaptiveSpec(budget, name, quant if name == "topk" else ADAPTIVE_DEFAULT_QUANT)


def _parse(text: str) -> Policy:
    if not isinstance(text, str) or not text:
        raise PolicyError("empty", f"compression policy is empty: use {FORMS}")
    if len(text) > MAX_POLICY_LEN:
        raise PolicyError(
            "too_long", f"compression policy is {len(text)} characters, at most {MAX_POLICY_LEN}"
        )
    if not _CHARSET.match(text):
        raise PolicyError("charset", f"compression policy {_show(text)} may only use [a-z0-9:/+.-]")
    return _adaptive(text) if text.startswith("adaptive") else _codec(text)


def parse_policy(text: str) -> Policy:
    """The strict parser (canonical spellings only): what the chain accepts and the trainer runs.

    >>> parse_policy("topk:0.01+int4").density
    Density(units=1, scale=2)
    """
    try:
        p = _parse(text)
    except PolicyError as err:
        try:
            fix = canonical_policy(text)
        except PolicyError:
            raise err from None
        raise _not_canonical(text, fix) from None
    if p.canonical != text:
        raise _not_canonical(text, p.canonical)
    return p


def _not_canonical(text: str, fix: str) -> PolicyError:
    return PolicyError(
        "not_canonical", f"compression policy {_show(text)} is not canonical: write {fix!r}"
    )


# ---------------------------------------------------------------- friendly spellings

ALIASES = {
    "none": "dense",
    "fp32": "dense",
    "fp16": "dense+fp16",
    "int8": "dense+int8",
    "int4": "dense+int4",
    "int2": "dense+int2",
}
_LOOSE_DEC = re.compile(r"^([0-9]*)(?:\.([0-9]*))?(?:e([+-]?[0-9]{1,3}))?$")
_LOOSE_INT = re.compile(r"^[0-9]{1,20}$")


def canonical_decimal(s: str) -> str:
    """``.01``, ``0.010``, ``1e-2``, ``1.0`` -> ``0.01``, ``1`` (exact; no floats)."""
    m = _LOOSE_DEC.match(s)
    if not m or not (m.group(1) or m.group(2)):
        return s
    whole, frac, exp = m.group(1), m.group(2) or "", int(m.group(3) or 0)
    units, scale = int(whole + frac or "0"), len(frac) - exp
    if scale < 0:
        units, scale = units * 10**-scale, 0
    while scale > 0 and units % 10 == 0:
        units, scale = units // 10, scale - 1
    if units == 0 or scale > MAX_DECIMALS:
        return s  # out of range: the strict parser says why
    if scale == 0:
        return str(units)
    digits = str(units).rjust(scale, "0")
    if len(digits) > scale:
        return s  # > 1: the strict parser says why
    return "0." + digits


def _loose_int(s: str) -> str:
    return str(int(s)) if _LOOSE_INT.match(s) else s


def canonical_policy(text: str) -> str:
    """Map a friendly spelling (see the module docstring) to the canonical policy string;
    raise ``PolicyError`` when it is not a policy at all. ``parse_policy`` of the result holds."""
    if not isinstance(text, str):
        raise PolicyError("empty", f"compression policy must be a string: use {FORMS}")
    s = text.strip().lower()
    s = ALIASES.get(s, s)
    if len(s) <= 4 * MAX_POLICY_LEN:
        s = _loosen(s)
    return _parse(s).canonical


def _loosen(s: str) -> str:
    if s.startswith("adaptive"):
        head, slash, ladder = s.partition("/")
        name, colon, budget = head.partition(":")
        head = f"{name}:{_loose_int(budget)}" if colon else name
        ladder = ladder.replace(">", "-")
        ladder = ladder.removesuffix("+fp32")
        return f"{head}/{ladder}" if slash else head
    base, plus, q = s.partition("+")
    if plus and q == "fp32":
        plus, q = "", ""
    family, colon, arg = base.partition(":")
    if colon:
        if family == "topk":
            arg = canonical_decimal(arg)
        elif family in ("chunk", "tchunk"):
            k, slash, c = arg.partition("/")
            arg = f"{_loose_int(k)}/{_loose_int(c) if slash else DEFAULT_CHUNK}"
        else:
            arg = _loose_int(arg)
    return f"{family}{colon}{arg}{plus}{q}"
