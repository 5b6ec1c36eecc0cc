"""The staking module's hooks: genesis bonds, end-block rewards, maturities, validator updates."""

from __future__ import annotations

from typing import Any

from abci_app.context import Ctx
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.staking import genesis, keeper, msgs
from abci_app.staking.keys import KEY_PREFIXES
from abci_app.staking.queries import QUERIES
from abci_app.store import CacheKV, KVReader


def _genesis(
    store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain
) -> list[abci.ValidatorUpdate]:
    return genesis.init_genesis(store, state, req)


def _end_block(ctx: Ctx) -> list[abci.ValidatorUpdate]:
    """Pay this block's fees and reward by the powers CometBFT used, pay matured unbondings,
    then turn every change of stake or jail status into validator updates (effective H+2)."""
    keeper.distribute_rewards(ctx)
    keeper.process_matured_unbondings(ctx)
    return keeper.apply_validator_set(ctx.store, ctx)


def _invariants(reader: KVReader) -> int:
    keeper.check_invariants(reader)
    return 0  # stake lives in module accounts (bank balances)


MODULE = ModuleSpec(
    name="staking",
    key_prefixes=KEY_PREFIXES,
    routes={
        "create_validator": msgs.process_msg_create_validator,
        "bond": msgs.process_msg_bond,
        "unbond": msgs.process_msg_unbond,
        "unjail": msgs.process_msg_unjail,
    },
    queries=QUERIES,
    init_genesis=_genesis,
    end_block=_end_block,
    invariants=_invariants,
)
