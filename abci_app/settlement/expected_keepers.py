"""What settlement needs from staking (Cosmos ``expected_keepers.go``): satisfied by the module
``abci_app.staking.keeper`` (wired in abci_app/modules.py)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from abci_app.context import Ctx
from abci_app.pb import staking_pb2
from abci_app.store import KVReader


class StakingKeeper(Protocol):
    def get_validator(self, store: KVReader, cons: bytes) -> staking_pb2.Validator | None: ...

    def iterate_validators(
        self, store: KVReader
    ) -> Iterator[tuple[bytes, staking_pb2.Validator]]: ...

    def slash(
        self, ctx: Ctx, cons: bytes, infraction_height: int, fraction_bps: int, reason: str
    ) -> int: ...

    def jail(self, ctx: Ctx, cons: bytes, until: int, reason: str) -> None: ...

    def tombstone(self, ctx: Ctx, cons: bytes) -> None: ...

    def is_tombstoned(self, store: KVReader, cons: bytes) -> bool: ...
