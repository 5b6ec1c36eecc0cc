"""Every message type the tx envelope can carry has exactly one handler, and no handler waits
for a message type the envelope cannot carry."""

import importlib

import pytest

from abci_app.module import ModuleSpec
from abci_app.modules import APP_QUERIES, META_PREFIX, MODULES, QUERIES, ROUTES, check_key_prefixes
from abci_app.pb import tx_pb2


def test_every_msg_type_is_routed() -> None:
    oneof = {f.name for f in tx_pb2.Msg.DESCRIPTOR.oneofs_by_name["sum"].fields}
    assert oneof == set(ROUTES), oneof ^ set(ROUTES)


def test_query_paths_are_unique_and_documented_modules_have_names() -> None:
    assert len(QUERIES) == sum(len(m.queries) for m in MODULES) + len(APP_QUERIES)
    assert len({m.name for m in MODULES}) == len(MODULES)
    for path in (
        "account",
        "supply",
        "validators",
        "validator",
        "params",
        "provider",
        "providers",
        "job",
        "jobs",
        "round",
        "rounds",
        "market_params",
    ):
        assert path in QUERIES, path


def test_key_prefixes_never_overlap() -> None:
    check_key_prefixes(MODULES)  # what modules.py runs at import
    assert all(m.key_prefixes for m in MODULES)
    owned = {p: m.name for m in MODULES for p in m.key_prefixes}
    assert len(owned) == sum(len(m.key_prefixes) for m in MODULES)
    clash = ModuleSpec(name="clash", key_prefixes=(b"\x52\x00",))  # inside jobs' 0x52
    with pytest.raises(RuntimeError, match="overlaps"):
        check_key_prefixes((*MODULES, clash))
    with pytest.raises(RuntimeError, match="overlaps"):
        check_key_prefixes((ModuleSpec(name="meta", key_prefixes=(b"\x00x",)),))  # the app's 0x00
    with pytest.raises(RuntimeError, match="overlaps"):
        check_key_prefixes(
            (
                ModuleSpec(name="a", key_prefixes=(b"\x70",)),
                ModuleSpec(name="b", key_prefixes=(b"\x70",)),
            )
        )


@pytest.mark.parametrize("module", list(MODULES), ids=[m.name for m in MODULES])
def test_registry_lists_every_prefix_constant_of_keys_py(module: ModuleSpec) -> None:
    keys = importlib.import_module(f"abci_app.{module.name}.keys")
    consts = {
        v for n, v in vars(keys).items() if n.endswith(("_PREFIX", "_KEY")) and isinstance(v, bytes)
    }
    assert consts and consts == set(module.key_prefixes)


def test_every_key_in_state_belongs_to_exactly_one_module() -> None:
    """After genesis, transfers, provider registration and a whole job with a missed commit, every
    key in the state tree starts with exactly one registered prefix (a module's or the app's)."""
    from tests.kits.marketkit import new_market, run_job

    m = new_market(n_providers=3)
    m.create_job(rounds=2)
    skip = frozenset({m.providers[0].address})
    run_job(m, 1, skip_commit=skip)
    prefixes = [META_PREFIX] + [p for mod in MODULES for p in mod.key_prefixes]
    keys = [k for k, _ in m.store.iterate(b"")]
    firsts = {k[:1] for k in keys}
    assert len(keys) > 20 and len(firsts) >= 10, firsts
    for k in keys:
        assert sum(k.startswith(p) for p in prefixes) == 1, k.hex()
