from abci_app.context import Ctx
from abci_app.module import ModuleSpec
from abci_app.pb import abci
from abci_app.staking import keeper
from abci_app.staking.queries import QUERIES


def _genesis(store, state, req):  # type: ignore[no-untyped-def]
    keeper.init_genesis(store, state, list(req.validators))
    return None


def _end_block(ctx: Ctx) -> list[abci.ValidatorUpdate]:
    keeper.distribute_fees(ctx)
    return []


MODULE = ModuleSpec(name="staking", queries=QUERIES, init_genesis=_genesis, end_block=_end_block)
