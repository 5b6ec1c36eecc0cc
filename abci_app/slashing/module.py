"""The slashing module: begin-block punishes committed evidence, then counts liveness from the
decided last commit. It runs before staking's end-block, which turns jails into updates."""

from __future__ import annotations

from typing import Any

from abci_app.context import Ctx
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.slashing import genesis, keeper
from abci_app.slashing.expected_keepers import StakingKeeper
from abci_app.slashing.keys import KEY_PREFIXES
from abci_app.slashing.queries import QUERIES
from abci_app.store import CacheKV, KVReader


def _genesis(store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain) -> None:
    genesis.init_genesis(store, state)


def _invariants(reader: KVReader) -> int:
    keeper.check_invariants(reader)
    return 0


def new_module(staking: StakingKeeper) -> ModuleSpec:
    """The slashing module over ``staking`` (the app passes ``abci_app.staking.keeper``)."""

    def _begin_block(ctx: Ctx) -> None:
        keeper.process_evidence(ctx, staking)
        keeper.process_liveness(ctx, staking)

    return ModuleSpec(
        name="slashing",
        key_prefixes=KEY_PREFIXES,
        queries=QUERIES,
        init_genesis=_genesis,
        begin_block=_begin_block,
        invariants=_invariants,
    )
