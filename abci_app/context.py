"""Execution context handed to every handler: the block's facts and the state to write to.

Time and randomness are inputs (``BlockContext``), never read from the machine. Handlers write
only through ``ctx.store`` (a CacheKV); a rejected tx's cache is discarded, so it changes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abci_app.pb import abci, vote_extension_pb2
from abci_app.store import CacheKV


@dataclass(frozen=True, slots=True)
class Vote:
    """One entry of the block's decided last commit (liveness input for slashing)."""

    validator: bytes  # 20-byte consensus address
    power: int
    signed: bool  # block_id_flag == COMMIT


@dataclass(frozen=True, slots=True)
class Misbehavior:
    """Evidence CometBFT committed (duplicate vote, light client attack)."""

    kind: int  # abci.MisbehaviorType
    validator: bytes
    height: int
    power: int


@dataclass(frozen=True, slots=True)
class BlockContext:
    height: int
    time_ns: int  # block time from the header (nanoseconds since the epoch)
    proposer: bytes  # 20-byte consensus address
    block_hash: bytes  # seeds on-chain sampling where the block has no beacon (see ``seed``)
    chain_id: str
    last_commit: tuple[Vote, ...] = ()
    misbehavior: tuple[Misbehavior, ...] = ()
    last_app_hash: bytes = b""  # app hash after the previous block (in this block's header)
    # (validator, extension) carried by the block from the last commit (abci_app/vote_extensions.py)
    vote_extensions: tuple[tuple[bytes, vote_extension_pb2.VoteExtension], ...] = ()
    # the validators' randomness beacon carried by the block (vote_extensions.block_beacon); b"" if
    # none
    beacon: bytes = b""

    @property
    def seed(self) -> bytes:
        """Randomness for on-chain draws: the beacon when the block carries one (no proposer can
        grind it), else the block hash (kits and chains without vote extensions)."""
        return self.beacon or self.block_hash


@dataclass(slots=True)
class Ctx:
    block: BlockContext
    store: CacheKV
    events: list[abci.Event] = field(default_factory=list)
    # False where nobody reads the events (CheckTx and recheck answer a code only): ``emit``
    # drops them, and a hot path may skip building one (``if ctx.recording: ctx.emit(...)``)
    recording: bool = True

    def emit(self, event: abci.Event) -> None:
        if self.recording:
            self.events.append(event)

    def child(self) -> Ctx:
        """A nested context whose writes and events are kept only if ``commit_child`` is called."""
        return Ctx(self.block, CacheKV(self.store), [], self.recording)

    def commit_child(self, child: Ctx) -> None:
        child.store.write()
        self.events.extend(child.events)


def event(kind: str, **attrs: str | int | bytes) -> abci.Event:
    """Build a typed event. Values: str as is, int in decimal, bytes in lower-case hex.
    Every attribute is indexed so ``tx_search`` / ``block_search`` can find it."""
    out = abci.Event(type=kind)
    for k in sorted(attrs):
        v = attrs[k]
        if isinstance(v, bytes):
            s = v.hex()
        elif isinstance(v, bool):
            s = "true" if v else "false"
        else:
            s = str(v)
        out.attributes.add(key=k, value=s, index=True)
    return out
