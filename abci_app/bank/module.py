"""bank module: route send (MsgSend); queries /account, /supply; genesis balances; invariant
sum(balances) == supply (module accounts are balances too)."""

from __future__ import annotations

from typing import Any

from abci_app.bank import genesis, keeper
from abci_app.bank.keys import KEY_PREFIXES
from abci_app.bank.msgs import process_msg_send
from abci_app.bank.queries import QUERIES
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.store import CacheKV, KVReader


def _genesis(store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain) -> None:
    genesis.init_genesis(store, state)


def _invariants(reader: KVReader) -> int:
    """sum(balances) == supply; module accounts (bonded pool, escrow) are balances too."""
    keeper.check_invariants(reader)
    return 0


MODULE = ModuleSpec(
    name="bank",
    key_prefixes=KEY_PREFIXES,
    routes={"send": process_msg_send},
    queries=QUERIES,
    init_genesis=_genesis,
    invariants=_invariants,
)
