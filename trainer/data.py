"""Datasets, shards and deterministic batch order.

* A dataset is any byte string (a text file); its id is ``sha256(file bytes)``.
* The last ``heldout_fraction`` (default 10 %) of the bytes is the held-out split (its first
  half scores updates, its second half is the only loss an adaptive policy may observe);
  the rest is the training split, cut into ``n_shards`` equal contiguous shards.
* ``ShardSpec`` pins everything a verifier needs to recompute a provider's batches:
  (dataset id, seed, job, round, provider, n_shards, batch size, context length, and the
  shard the chain assigned: ``Participant.shard``, distinct within a round).
  The shard index and every batch's offsets are drawn from ``DetRNG`` (sha256 counter
  mode) keyed by those fields and the inner step number, so the batch of step s does
  not depend on any other step: a segment can be re-run from its own start.
"""

from __future__ import annotations

import hashlib
import importlib.util
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from trainer.determinism import DetRNG


@dataclass(kw_only=True, slots=True, frozen=True)
class ShardSpec:
    """Which data a provider must train on in one round."""

    dataset_id: str  # hex sha256 of the dataset bytes
    seed: int  # job seed (from the chain)
    job: int
    round: int
    provider: str  # provider id/address (hex or any string)
    n_shards: int = 16
    batch_size: int = 8
    block_size: int = 32
    # the shard the chain assigned (Participant.shard); -1: derived from DetRNG (local runs only)
    shard: int = -1

    def __post_init__(self) -> None:
        if not -1 <= self.shard < self.n_shards:
            raise ValueError(f"shard {self.shard} is outside 0..{self.n_shards - 1} (n_shards)")

    def shard_index(self) -> int:
        """The assigned shard (``shard``) when set, else a DetRNG draw keyed by the spec."""
        if self.shard >= 0:
            return self.shard
        return DetRNG(
            "shard", self.dataset_id, self.seed, self.job, self.round, self.provider
        ).randbelow(self.n_shards)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ShardSpec:
        return cls(**d)


class Corpus:
    """A byte dataset with a train split (in shards) and a held-out split."""

    def __init__(self, data: bytes, heldout_fraction: float = 0.1) -> None:
        if len(data) < 1024:
            raise ValueError(f"dataset too small ({len(data)} bytes): need at least 1024")
        self.data = bytes(data)
        self.id = hashlib.sha256(self.data).hexdigest()
        n_held = max(int(len(self.data) * heldout_fraction), 256)
        self._train = torch.frombuffer(bytearray(self.data[:-n_held]), dtype=torch.uint8)
        self._heldout = torch.frombuffer(bytearray(self.data[-n_held:]), dtype=torch.uint8)

    @classmethod
    def from_file(cls, path: str | Path, heldout_fraction: float = 0.1) -> Corpus:
        p = Path(path)
        if not p.is_file():
            raise FileNotFoundError(f"dataset file not found: {p} (pass --data FILE)")
        return cls(p.read_bytes(), heldout_fraction)

    @property
    def train(self) -> torch.Tensor:
        return self._train

    @property
    def heldout(self) -> torch.Tensor:
        return self._heldout

    def shard_bounds(self, spec: ShardSpec) -> tuple[int, int]:
        """[start, end) byte range of the spec's shard inside the train split."""
        if spec.dataset_id != self.id:
            raise ValueError(
                f"shard spec is for dataset {spec.dataset_id[:12]}, corpus is {self.id[:12]}"
            )
        n = len(self._train)
        size = n // spec.n_shards
        if size < spec.block_size + 2:
            raise ValueError("shards are smaller than one context: use fewer shards")
        i = spec.shard_index()
        return i * size, (i + 1) * size

    def batch_offsets(self, spec: ShardSpec, step: int) -> list[int]:
        """Start offsets (into the train split) of the batch of inner ``step``."""
        lo, hi = self.shard_bounds(spec)
        rng = DetRNG("batch", spec.dataset_id, spec.seed, spec.job, spec.round, spec.provider, step)
        span = hi - lo - spec.block_size - 1
        return [lo + rng.randbelow(span + 1) for _ in range(spec.batch_size)]

    def batch(self, spec: ShardSpec, step: int, device: str | torch.device = "cpu"):
        """(x, y) int64 tensors of shape (batch_size, block_size) for inner ``step``."""
        offs = self.batch_offsets(spec, step)
        T = spec.block_size
        x = torch.stack([self._train[o : o + T] for o in offs]).long()
        y = torch.stack([self._train[o + 1 : o + 1 + T] for o in offs]).long()
        return x.to(device), y.to(device)

    def heldout_part(self, part: str = "eval") -> torch.Tensor:
        """The held-out split is cut in two halves: ``eval`` (the first: the public evaluation
        set updates are scored on) and ``policy`` (the second: what an adaptive compression
        policy may steer on). A policy that steered on the evaluation set could overfit its
        own score; keeping them apart is a rule, not a tuning choice."""
        half = len(self._heldout) // 2
        if part == "eval":
            return self._heldout[:half]
        if part == "policy":
            return self._heldout[half:]
        raise ValueError(f"held-out part must be 'eval' or 'policy', got {part!r}")

    def heldout_batches(
        self, block_size: int, batch_size: int = 32, max_batches: int = 8, part: str = "eval"
    ):
        """Fixed, non-overlapping windows from one half of the held-out split (``part``)."""
        held = self.heldout_part(part)
        T = block_size
        n_windows = (len(held) - 1) // T
        n_windows = min(n_windows, batch_size * max_batches)
        if n_windows == 0:
            raise ValueError("held-out split is shorter than one context")
        xs = torch.stack([held[i * T : i * T + T] for i in range(n_windows)]).long()
        ys = torch.stack([held[i * T + 1 : i * T + T + 1] for i in range(n_windows)]).long()
        return [
            (xs[i : i + batch_size], ys[i : i + batch_size])
            for i in range(0, n_windows, batch_size)
        ]


def default_corpus_bytes(min_bytes: int = 400_000) -> bytes:
    """A deterministic text corpus for tests and the default ``--data``.

    The sources of a fixed list of Python standard-library modules, concatenated in
    order. Its sha256 depends on the Python version (it is reported as the dataset
    id); within one interpreter it is fixed.
    """
    names = [
        "argparse",
        "dataclasses",
        "textwrap",
        "string",
        "fractions",
        "statistics",
        "difflib",
        "heapq",
        "bisect",
        "calendar",
        "csv",
        "json.decoder",
        "json.encoder",
        "pprint",
        "shlex",
        "tokenize",
        "typing",
        "enum",
        "functools",
        "inspect",
    ]
    out = bytearray()
    for n in names:
        spec = importlib.util.find_spec(n)
        if spec is None or spec.origin is None or not spec.origin.endswith(".py"):
            continue
        out += Path(spec.origin).read_bytes()
        if len(out) >= min_bytes:
            break
    if len(out) < 4096:  # no sources installed: fall back to synthetic text
        out = bytearray(synthetic_text(min_bytes))
    return bytes(out)


def synthetic_text(n_bytes: int, seed: int = 0) -> bytes:
    """Deterministic pseudo-English text from a small grammar (DetRNG-driven)."""
    words = (
        "the a one every some node block chain round model update provider verifier "
        "trains checks sends holds signs keeps finds reads writes small large fast slow "
        "honest quick careful and but so then while because"
    ).split()
    rng = DetRNG("synthetic-text", seed)
    out = bytearray()
    while len(out) < n_bytes:
        n = 4 + rng.randbelow(8)
        sent = " ".join(words[rng.randbelow(len(words))] for _ in range(n))
        out += (sent[0].upper() + sent[1:] + ". ").encode()
        if rng.randbelow(6) == 0:
            out += b"\n"
    return bytes(out[:n_bytes])
