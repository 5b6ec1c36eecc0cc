"""Every message type the tx envelope can carry has exactly one handler, and no handler waits
for a message type the envelope cannot carry."""

from abci_app.modules import MODULES, QUERIES, ROUTES
from abci_app.pb import tx_pb2


def test_every_msg_type_is_routed() -> None:
    oneof = {f.name for f in tx_pb2.Msg.DESCRIPTOR.oneofs_by_name["sum"].fields}
    assert oneof == set(ROUTES), (oneof ^ set(ROUTES))


def test_query_paths_are_unique_and_documented_modules_have_names() -> None:
    assert len(QUERIES) == sum(len(m.queries) for m in MODULES)
    assert len({m.name for m in MODULES}) == len(MODULES)
    for path in ("account", "supply", "validators", "validator", "params", "provider", "providers",
                 "job", "jobs", "round", "rounds", "market_params"):
        assert path in QUERIES, path
