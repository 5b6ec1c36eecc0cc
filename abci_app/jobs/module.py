"""jobs module: routes create_job=30, cancel_job=31, submit_update=32, reveal_segment=33,
verdict=34, attest_model=35, reveal_vote=36, decline_round=37, open_end=38; end_block advances
every round by height. Built by ``new_module`` over the providers keeper the app wires in (jobs
imports nothing from abci_app.providers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from abci_app.context import Ctx
from abci_app.jobs import genesis, keeper, sla
from abci_app.jobs.expected import ProviderKeeper
from abci_app.jobs.keys import KEY_PREFIXES
from abci_app.jobs.msgs import (
    process_msg_attest_model,
    process_msg_cancel_job,
    process_msg_create_job,
    process_msg_decline_round,
    process_msg_open_end,
    process_msg_reveal_segment,
    process_msg_reveal_vote,
    process_msg_submit_update,
    process_msg_verdict,
)
from abci_app.jobs.queries import QUERIES
from abci_app.jobs.rounds import close_after_message, process_rounds
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.store import CacheKV, KVReader


def _closing(handler: Callable[[Ctx, bytes, Any], None]) -> Callable[[Ctx, bytes, Any], None]:
    """A round message's route: the handler, then the early close of its round's phase if the
    message was the last one the phase waited for (rounds.close_after_message)."""

    def route(ctx: Ctx, signer: bytes, msg: Any) -> None:
        handler(ctx, signer, msg)
        close_after_message(ctx, msg.job_id, msg.round)

    route.__name__ = handler.__name__
    route.__doc__ = handler.__doc__
    return route


def new_module(providers: ProviderKeeper) -> ModuleSpec:
    """The jobs module over ``providers`` (the app passes ``abci_app.providers.keeper``)."""

    def _genesis(store: CacheKV, state: dict[str, Any], req: abci.RequestInitChain) -> None:
        genesis.init_genesis(store, state, providers)

    def _end_block(ctx: Ctx) -> list[abci.ValidatorUpdate]:
        process_rounds(ctx, providers)
        return []

    def _invariants(store: KVReader) -> int:
        held = keeper.check_invariants(store)
        sla.check_invariants(store)
        return held

    return ModuleSpec(
        name="jobs",
        key_prefixes=KEY_PREFIXES,
        routes={
            "create_job": process_msg_create_job,
            "cancel_job": process_msg_cancel_job,
            "submit_update": _closing(process_msg_submit_update),
            "reveal_segment": _closing(process_msg_reveal_segment),
            "verdict": _closing(process_msg_verdict),
            "attest_model": _closing(process_msg_attest_model),
            "reveal_vote": _closing(process_msg_reveal_vote),
            "decline_round": _closing(process_msg_decline_round),
            "open_end": _closing(process_msg_open_end),
        },
        queries=QUERIES,
        init_genesis=_genesis,
        end_block=_end_block,
        invariants=_invariants,
    )
