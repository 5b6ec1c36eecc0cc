"""The staking module's hooks: genesis bonds, end-block rewards, maturities, validator updates.

``new_module(keys)`` takes settlement's read-only key registry (``SettlementKeys``): where
settlement requires a key, a validator without one is kept out of CometBFT's set."""

from __future__ import annotations

from functools import partial
from typing import Any

from abci_app.context import Ctx
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.staking import genesis, keeper, msgs
from abci_app.staking.expected_keepers import SettlementKeys
from abci_app.staking.keys import KEY_PREFIXES
from abci_app.staking.queries import new_queries
from abci_app.store import CacheKV, KVReader


def new_module(keys: SettlementKeys) -> ModuleSpec:
    def _genesis(
        store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain
    ) -> list[abci.ValidatorUpdate]:
        # settlement's genesis runs after this one and refuses a powered validator without a key
        return genesis.init_genesis(store, state, req)

    def _end_block(ctx: Ctx) -> list[abci.ValidatorUpdate]:
        """Pay this block's fees and reward by the powers CometBFT used, pay matured unbondings,
        then turn every change of stake, jail status or settlement key into validator updates
        (effective H+2)."""
        keeper.distribute_rewards(ctx)
        keeper.process_matured_unbondings(ctx)
        return keeper.apply_validator_set(ctx.store, ctx, keys)

    def _invariants(reader: KVReader) -> int:
        keeper.check_invariants(reader, keys)
        return 0  # stake lives in module accounts (bank balances)

    return ModuleSpec(
        name="staking",
        key_prefixes=KEY_PREFIXES,
        routes={
            "create_validator": partial(msgs.process_msg_create_validator, keys=keys),
            "bond": partial(msgs.process_msg_bond, keys=keys),
            "unbond": partial(msgs.process_msg_unbond, keys=keys),
            "unjail": partial(msgs.process_msg_unjail, keys=keys),
        },
        queries=new_queries(keys),
        init_genesis=_genesis,
        end_block=_end_block,
        invariants=_invariants,
    )
