"""The chain's round JSON as typed records, parsed once where the worker reads it (``/rounds``
queries) and passed inward: the duties read fields, not dictionary keys.

The field names are the chain's JSON keys (abci_app/jobs: the /round query's ``Participant``,
``Challenge``, ``Reveal`` and ``Verifier``), so the mapping is one to one; only what the worker
reads is typed. Every field has a default: the chain omits empty ones, and a malformed round is
the chain's answer, which the loop survives (``from_json`` raises KeyError, TypeError or
ValueError on a wrong type, and the job's pass logs it).

``Vote`` is the worker's own record: what ``judge`` decided about one target, committed as a
hash (MsgVerdict) and opened in the next window (MsgRevealVote).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from abci_app.jobs.phases import PHASE_END_FIELD_BY_NAME

# a duty whose window ends within this many blocks is tried again at least every DUE_RETRY_S
# (worker.py), whatever its backoff: a retry scheduled past a short window turned one transient
# error into a missed reveal (slashed as fraud) or a silent verifier (slashed for liveness)
DUE_BLOCKS = 4
# phase -> (verifier panel, whether votes are opened in it): MsgVerdict carries a vote's hash,
# MsgRevealVote opens it in the next window (abci_app/jobs/rounds.py)
PANEL_OF = {
    "verdict": (0, False),
    "vote_reveal": (0, True),
    "appeal": (1, False),
    "appeal_reveal": (1, True),
    "final": (2, False),
    "final_reveal": (2, True),
}


def _ints(xs: Any) -> tuple[int, ...]:
    return tuple(int(x) for x in xs or ())


@dataclass(frozen=True)
class Job:
    """An active job (the /jobs query's JSON): its id and spec. The spec stays the chain's JSON
    (ml.JobPlan parses the training terms from it); the fields the duties read are typed."""

    id: int
    spec: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Job:
        return cls(id=int(d["id"]), spec=dict(d.get("spec") or {}))

    @classmethod
    def of(cls, j: Job | Mapping[str, Any]) -> Job:
        """``j`` itself, or parsed from the chain's JSON (the worker's entry points take both)."""
        return j if isinstance(j, Job) else cls.from_json(j)

    def to_json(self) -> dict[str, Any]:
        """The chain's JSON again, for ml.JobPlan.from_job."""
        return {"id": self.id, "spec": dict(self.spec)}

    @property
    def initial_model_hash(self) -> str:
        return str(self.spec.get("initial_model_hash") or "")

    @property
    def dataset_id(self) -> str:
        return str(self.spec.get("dataset_id") or "")

    @property
    def blob_sources(self) -> list[str]:
        return [str(u) for u in self.spec.get("blob_sources") or ()]

    @property
    def tolerance_ppm(self) -> int:
        return int(self.spec.get("tolerance_ppm") or 0)

    @property
    def verdict_blocks(self) -> int:
        """The length of the job's verdict window (its spec's ``windows.verdict``)."""
        return int((self.spec.get("windows") or {}).get("verdict", 0) or 0)


@dataclass(frozen=True)
class Opening:
    """One opened segment (the chain's ``Reveal``): its start in the clear (a run's start) or
    as a leaf hash, its end as a leaf hash until MsgOpenEnd opens it (tolerance mode)."""

    segment: int = 0
    panel: int = 0  # the panel that drew it: 0 the first, 1 appeal, 2 final (fresh segments)
    start_state_hash: str = ""
    start_location: str = ""
    end_state_hash: str = ""
    end_location: str = ""
    end_leaf_hash: str = ""
    trace_list_hash: str = ""
    end_probe: tuple[int, ...] = ()
    end_opened_height: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any], segment: int | None = None) -> Opening:
        return cls(
            segment=int(d["segment"] if segment is None else segment),
            panel=int(d.get("panel") or 0),
            start_state_hash=str(d.get("start_state_hash") or ""),
            start_location=str(d.get("start_location") or ""),
            end_state_hash=str(d.get("end_state_hash") or ""),
            end_location=str(d.get("end_location") or ""),
            end_leaf_hash=str(d.get("end_leaf_hash") or ""),
            trace_list_hash=str(d.get("trace_list_hash") or ""),
            end_probe=_ints(d.get("end_probe")),
            end_opened_height=int(d.get("end_opened_height") or 0),
        )


@dataclass(frozen=True)
class Verifier:
    """One verifier seat on a challenge: its panel, and whether its vote is committed (the
    hash) and opened (``voted``)."""

    address: str = ""
    panel: int = 0
    committed: bool = False
    voted: bool = False

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Verifier:
        return cls(
            address=str(d.get("address") or ""),
            panel=int(d.get("panel") or 0),
            committed=bool(d.get("committed")),
            voted=bool(d.get("voted")),
        )


@dataclass(frozen=True)
class Challenge:
    """A participant's challenge: the first panel's segments, the fresh ones drawn for the
    later panels, the openings so far and the verifier seats."""

    segment: int = 0
    segments: tuple[int, ...] = ()
    opened: tuple[int, ...] = ()
    reveal: Opening | None = None  # the first opening; None: not revealed yet
    reveals: tuple[Opening, ...] = ()
    verifiers: tuple[Verifier, ...] = ()
    appeal_segments: tuple[int, ...] = ()
    final_segments: tuple[int, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Challenge:
        seg = int(d.get("segment") or 0)
        rev = d.get("reveal")
        return cls(
            segment=seg,
            segments=_ints(d.get("segments")),
            opened=_ints(d.get("opened")),
            reveal=None if rev is None else Opening.from_json(rev, int(rev.get("segment", seg))),
            reveals=tuple(Opening.from_json(o) for o in d.get("reveals") or ()),
            verifiers=tuple(Verifier.from_json(v) for v in d.get("verifiers") or ()),
            appeal_segments=_ints(d.get("appeal_segments")),
            final_segments=_ints(d.get("final_segments")),
        )

    @property
    def first_segments(self) -> list[int]:
        """The first panel's segments (an old chain named one: ``segment``)."""
        return list(self.segments) or [self.segment]

    def fresh(self, panel: int) -> list[int]:
        """The fresh segments drawn for ``panel`` (1 appeal, 2 final)."""
        return list({1: self.appeal_segments, 2: self.final_segments}.get(panel, ()))

    def fresh_unopened(self, panel: int) -> list[int]:
        """The fresh segments of ``panel`` not opened yet (what the provider must open, and what
        the panel's verifiers wait for before they judge)."""
        opened = {o.segment for o in self.reveals if o.panel == panel}
        return [s for s in self.fresh(panel) if s not in opened]

    def panel_openings(self, panel: int) -> list[Opening]:
        """The openings ``panel`` judges, in segment order: its own fresh segments and every
        earlier panel's (abci_app.jobs.incentives.compute_panel_reveals)."""
        return sorted((o for o in self.reveals if o.panel <= panel), key=lambda o: o.segment)

    def ends_to_open(self, panel: int) -> list[int]:
        """Tolerance mode: the segments of ``panel`` whose ends are not opened yet."""
        return [o.segment for o in self.reveals if not o.end_opened_height and o.panel == panel]

    def seats_of(self, address: str, panel: int) -> list[Verifier]:
        return [v for v in self.verifiers if v.address == address and v.panel == panel]


@dataclass(frozen=True)
class Commitment:
    """A participant's commitment (MsgSubmitUpdate as the chain keeps it)."""

    update_root: str = ""
    trace_root: str = ""
    payload_size: int = 0
    blob_location: str = ""

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Commitment:
        return cls(
            update_root=str(d.get("update_root") or ""),
            trace_root=str(d.get("trace_root") or ""),
            payload_size=int(d.get("payload_size") or 0),
            blob_location=str(d.get("blob_location") or ""),
        )


@dataclass(frozen=True)
class Participant:
    """A provider drawn in a round: its shard, commitment, challenge and outcome."""

    address: str = ""
    shard: int = 0
    commitment: Commitment | None = None
    challenge: Challenge | None = None
    outcome: str = ""
    attested_hash: str = ""
    reward: int = 0
    slashed: int = 0

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Participant:
        c, ch = d.get("commitment"), d.get("challenge")
        return cls(
            address=str(d.get("address") or ""),
            shard=int(d.get("shard") or 0),
            commitment=None if c is None else Commitment.from_json(c),
            challenge=Challenge.from_json(ch) if ch else None,
            outcome=str(d.get("outcome") or ""),
            attested_hash=str(d.get("attested_hash") or ""),
            reward=int(d.get("reward") or 0),
            slashed=int(d.get("slashed") or 0),
        )

    @property
    def revealed(self) -> bool:
        """Challenged and its first opening on chain."""
        return self.challenge is not None and self.challenge.reveal is not None


@dataclass(frozen=True)
class Round:
    """One round of a job (the /rounds query's JSON): its phase, the windows' last heights by
    field name, its base model and participants."""

    job_id: int = 0
    round: int = 0
    phase: str = ""
    base_model_hash: str = ""
    attested_model_hash: str = ""
    windows: Mapping[str, int] = field(default_factory=dict)
    participants: tuple[Participant, ...] = ()

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Round:
        return cls(
            job_id=int(d.get("job_id") or 0),
            round=int(d.get("round") or 0),
            phase=str(d.get("phase") or ""),
            base_model_hash=str(d.get("base_model_hash") or ""),
            attested_model_hash=str(d.get("attested_model_hash") or ""),
            windows={str(k): int(v or 0) for k, v in (d.get("windows") or {}).items()},
            participants=tuple(Participant.from_json(p) for p in d.get("participants") or ()),
        )

    @classmethod
    def of(cls, r: Round | Mapping[str, Any]) -> Round:
        """``r`` itself, or parsed from the chain's JSON (the worker's entry points take both)."""
        return r if isinstance(r, Round) else cls.from_json(r)

    @property
    def key(self) -> str:
        """``JOB/ROUND``: the blob store's round key and the stats' round label."""
        return f"{self.job_id}/{self.round}"

    def window(self, name: str) -> int:
        return int(self.windows.get(name, 0) or 0)

    def participant(self, address: str) -> Participant | None:
        return next((p for p in self.participants if p.address == address), None)

    @property
    def panel(self) -> int:
        """The verifier panel acting in this phase (0 outside the panels' windows)."""
        return PANEL_OF.get(self.phase, (0, False))[0]

    def phase_end(self) -> int:
        """The last height of the round's current phase (0: a phase without an end)."""
        return self.window(PHASE_END_FIELD_BY_NAME.get(self.phase, ""))

    def is_due(self, height: int) -> bool:
        """The round's current phase ends within DUE_BLOCKS blocks of ``height``."""
        end = self.phase_end()
        return end > 0 and height >= end - DUE_BLOCKS


def as_participant(p: Participant | Mapping[str, Any]) -> Participant:
    """``p`` itself, or parsed from the chain's JSON (the worker's entry points take both)."""
    return p if isinstance(p, Participant) else Participant.from_json(p)


@dataclass(frozen=True)
class Vote:
    """What ``judge`` decided about one target: valid or not, its quality (0..MAX_QUALITY),
    ``reached`` (the end state hash of each opened segment, in segment order: the vote's
    evidence) and why. Invalid with nothing reached: UNAVAILABLE (the revealed states could not
    be fetched; sent as MsgRevealVote.unavailable)."""

    valid: bool
    quality: int
    reached: tuple[bytes, ...]
    why: str

    @classmethod
    def unavailable_vote(cls, why: str) -> Vote:
        """The vote when the revealed states cannot be fetched: invalid, quality 0 and nothing
        reached (a vote that re-executed always names one state per opened segment)."""
        return cls(False, 0, (), why)

    @property
    def is_unavailable(self) -> bool:
        return not self.valid and not self.reached

    def stored(self) -> dict[str, Any]:
        """The vote as progress.json keeps it, to be opened next window exactly as hashed."""
        return {
            "valid": self.valid,
            "quality": self.quality,
            "reached": [x.hex() for x in self.reached],
            "why": self.why,
            "unavailable": self.is_unavailable,
        }
