"""settlement module: routes set_settlement_key=60, withdraw_to_evm=61, sign_checkpoint=62,
report_forged_checkpoint=63; begin-block applies the checkpoint signatures carried by the
block's vote extensions, then makes a due checkpoint; end-block (after staking's) makes a valset
update when the set just moved by more than 1/4 of the signer set's power."""

from __future__ import annotations

from functools import partial
from typing import Any

from abci_app.context import Ctx
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.settlement import genesis, keeper
from abci_app.settlement.expected_keepers import StakingKeeper
from abci_app.settlement.keys import KEY_PREFIXES
from abci_app.settlement.msgs import (
    new_report_forged_checkpoint,
    new_set_settlement_key,
    process_msg_sign_checkpoint,
    process_msg_withdraw_to_evm,
)
from abci_app.settlement.queries import QUERIES, query_settlement
from abci_app.store import CacheKV, KVReader


def new_module(staking: StakingKeeper) -> ModuleSpec:
    def _genesis(store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain) -> None:
        genesis.init_genesis(store, state, req, staking)

    def _begin_block(ctx: Ctx) -> None:
        votes = [
            (v, ext.settlement)
            for v, ext in ctx.block.vote_extensions
            if ext.HasField("settlement")
        ]
        keeper.apply_votes(ctx, votes)
        keeper.make_checkpoint(ctx, staking)

    def _end_block(ctx: Ctx) -> list[abci.ValidatorUpdate]:
        keeper.make_valset_update(ctx, staking)
        return []

    def _invariants(reader: KVReader) -> int:
        return keeper.check_invariants(reader)

    return ModuleSpec(
        name="settlement",
        key_prefixes=KEY_PREFIXES,
        routes={
            "set_settlement_key": new_set_settlement_key(staking),
            "withdraw_to_evm": process_msg_withdraw_to_evm,
            "sign_checkpoint": process_msg_sign_checkpoint,
            "report_forged_checkpoint": new_report_forged_checkpoint(staking),
        },
        queries={**QUERIES, "settlement": partial(query_settlement, staking=staking)},
        init_genesis=_genesis,
        begin_block=_begin_block,
        end_block=_end_block,
        invariants=_invariants,
    )
