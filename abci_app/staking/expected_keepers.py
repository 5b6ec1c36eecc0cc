"""What staking reads from settlement (Cosmos ``expected_keepers.go``): satisfied by the module
``abci_app.settlement.keeper`` (wired in abci_app/modules.py). Read-only: staking never writes
settlement's keys."""

from __future__ import annotations

from typing import Protocol

from abci_app.store import KVReader


class SettlementKeys(Protocol):
    def requires_settlement_key(self, store: KVReader) -> bool:
        """Is a validator without a settlement key kept out of CometBFT's set?"""
        ...

    def has_settlement_key(self, store: KVReader, validator: bytes) -> bool: ...
