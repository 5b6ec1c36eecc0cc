"""A genesis app_state of the wrong shape halts InitChain with a GenesisError naming the field
(attacker-review regression): a top-level list, ``"bank": []``, ``"balances": {...}`` and a bad
base64 pub_key were AttributeError/TypeError/binascii tracebacks; a misspelt module ("bnak")
was ignored, so the chain started without those balances; non-ASCII digits ("١٢") were read
as 12. The well-formed genesis still starts."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from abci_app.app import Application
from abci_app.errors import GenesisError
from abci_app.pb import abci
from abci_app.store import MerkleStore
from tests.kits.chainkit import genesis_request, signer

KEYS = [signer(i) for i in range(2)]
VAL = signer(1000)


def _request(edit: Callable[[dict[str, Any]], Any]) -> abci.RequestInitChain:
    req = genesis_request({k.address: 10**9 for k in KEYS}, [(VAL, 10)])
    state = json.loads(req.app_state_bytes)
    new = edit(state)
    req.app_state_bytes = json.dumps(state if new is None else new).encode()
    return req


def _app() -> Application:
    app = Application(MerkleStore(None, keep_recent=5), check_invariants=True)
    app.info(abci.RequestInfo())
    return app


def test_the_well_formed_genesis_starts() -> None:
    assert _app().init_chain(_request(lambda s: None)).app_hash


def _set(path: tuple[str, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(state: dict[str, Any]) -> None:
        cur: Any = state
        for p in path[:-1]:
            cur = cur[p]
        cur[path[-1]] = value

    return edit


CASES: dict[str, tuple[Callable[[dict[str, Any]], Any], str]] = {
    "top-level list": (lambda s: [s], "must be a JSON object of module states"),
    "misspelt module": (lambda s: {"bnak": s.pop("bank"), **s}, "unknown modules ['bnak']"),
    "bank is a list": (_set(("bank",), []), "app_state.bank must be a JSON object"),
    "balances is an object": (_set(("bank", "balances"), {"a": 1}), "app_state.bank"),
    "balance entry is a string": (_set(("bank", "balances"), ["x"]), "app_state.bank"),
    "balance without amount": (
        lambda s: s["bank"]["balances"][0].pop("amount") and None,
        "app_state.bank: missing field 'amount'",
    ),
    "non-ASCII digits": (
        lambda s: s["bank"]["balances"][0].update(amount="\u0661\u0662"),
        "non-negative decimal integer",
    ),
    "bad base64 pub_key": (
        lambda s: s["staking"]["validators"][0].update(pub_key="!!not base64!!"),
        "app_state.staking",
    ),
    "validators is a number": (_set(("staking", "validators"), 5), "app_state.staking"),
    # a moniker follows MsgCreateValidator's rule: a number was stored as "7", a newline kept
    "moniker is a number": (
        lambda s: s["staking"]["validators"][0].update(moniker=7),
        "moniker must be a string",
    ),
    "moniker with a control character": (
        lambda s: s["staking"]["validators"][0].update(moniker="node0\n<b>"),
        "printable characters",
    ),
    "moniker too long": (
        lambda s: s["staking"]["validators"][0].update(moniker="n" * 65),
        "printable characters",
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_malformed_genesis_is_a_genesis_error_naming_the_field(case: str) -> None:
    edit, want = CASES[case]
    with pytest.raises(GenesisError) as e:
        _app().init_chain(_request(edit))
    assert want in str(e.value), str(e.value)
