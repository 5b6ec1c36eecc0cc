"""What jobs needs from other modules (Cosmos ``expected_keepers``): a small Protocol each."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from abci_app.context import Ctx
from abci_app.pb import providers_pb2
from abci_app.store import CacheKV, KVReader


class SlashOutcome(Protocol):
    @property
    def amount(self) -> int: ...
    @property
    def bounties(self) -> tuple[tuple[bytes, int], ...]: ...
    @property
    def burned(self) -> int: ...


class ProviderKeeper(Protocol):
    """Satisfied by the module ``abci_app.providers.keeper`` (wired in ``abci_app/modules.py``)."""

    def get_unbonding_blocks(self, store: KVReader) -> int: ...

    def get_provider(self, store: KVReader, address: bytes) -> providers_pb2.Provider | None: ...

    def get_eligible(
        self, store: KVReader, min_reputation: int, min_stake: int
    ) -> list[providers_pb2.Provider]: ...

    def get_draw_pool(
        self, store: CacheKV, min_reputation: int, min_stake: int
    ) -> list[providers_pb2.Provider]: ...

    def get_reputation(self, store: KVReader, address: bytes) -> int: ...

    def meets_throughput(self, store: KVReader, p: providers_pb2.Provider, need: int) -> bool: ...

    def record_throughput(
        self, store: CacheKV, address: bytes, sample: int, verified: bool
    ) -> int: ...

    def is_tombstoned(self, store: KVReader, address: bytes) -> bool: ...

    def set_reputation(self, store: CacheKV, address: bytes, value: int) -> int: ...

    def jail(self, ctx: Ctx, address: bytes, reason: str) -> None: ...

    def slash(
        self,
        ctx: Ctx,
        address: bytes,
        fraction_bps: int,
        *,
        reason: str,
        job_id: int,
        round_: int,
        bounty_bps: int = 0,
        bounty_weights: Sequence[tuple[bytes, int]] = (),
        min_amount: int = 0,
    ) -> SlashOutcome: ...
