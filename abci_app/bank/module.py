from abci_app.bank import genesis, keeper
from abci_app.bank.keys import KEY_PREFIXES
from abci_app.bank.msgs import process_msg_send
from abci_app.bank.queries import QUERIES
from abci_app.module import ModuleSpec


def _genesis(store, state, req):  # type: ignore[no-untyped-def]
    genesis.init_genesis(store, state)


def _invariants(reader) -> int:  # type: ignore[no-untyped-def]
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
