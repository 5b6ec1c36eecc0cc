"""providers module: routes register_provider=20, update_provider=21, exit_provider=22."""

from __future__ import annotations

from typing import Any

from abci_app.context import Ctx
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.providers import genesis, keeper
from abci_app.providers.keys import KEY_PREFIXES
from abci_app.providers.msgs import (
    process_msg_exit_provider,
    process_msg_register_provider,
    process_msg_update_provider,
)
from abci_app.providers.queries import QUERIES
from abci_app.store import CacheKV, KVReader


def _genesis(store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain) -> None:
    genesis.init_genesis(store, state)


def _end_block(ctx: Ctx) -> list[abci.ValidatorUpdate]:
    keeper.process_unbonding_queue(ctx)
    return []


def _invariants(reader: KVReader) -> int:
    return keeper.check_invariants(reader)


MODULE = ModuleSpec(
    name="providers",
    key_prefixes=KEY_PREFIXES,
    routes={
        "register_provider": process_msg_register_provider,
        "update_provider": process_msg_update_provider,
        "exit_provider": process_msg_exit_provider,
    },
    queries=QUERIES,
    init_genesis=_genesis,
    end_block=_end_block,
    invariants=_invariants,
)
