"""What slashing needs from staking (Cosmos ``expected_keepers.go``): satisfied by the module
``abci_app.staking.keeper``."""

from __future__ import annotations

from typing import Protocol

from abci_app.context import Ctx
from abci_app.store import KVReader


class StakingKeeper(Protocol):
    def slash(
        self, ctx: Ctx, cons: bytes, infraction_height: int, fraction_bps: int, reason: str
    ) -> int: ...

    def jail(self, ctx: Ctx, cons: bytes, until: int, reason: str) -> None: ...

    def tombstone(self, ctx: Ctx, cons: bytes) -> None: ...

    def is_tombstoned(self, store: KVReader, cons: bytes) -> bool: ...

    def is_jailed(self, store: KVReader, cons: bytes) -> bool: ...
