"""No query path answers a question it was not asked: segments a handler does not read are
refused, not ignored (attacker-review finding: ``/validators/<hex>``, a typo of
``/validator/<hex>``, returned the whole list with code 0; ``/supply/x`` the supply;
``/market_params/jobs`` both modules). Checked over every registered path, so a new handler
that forgets its arity fails here."""

from __future__ import annotations

import pytest

from abci_app.modules import QUERIES
from abci_app.pb import abci
from tests.kits.chainkit import new_chain

CHAIN = new_chain()
# five segments past the route: more than any handler reads (the deepest, /jobs/.../rounds/N,
# takes four)
EXTRA = "/x/0/rounds/1/zz"


@pytest.mark.parametrize("route", sorted(QUERIES))
def test_every_path_refuses_segments_it_does_not_read(route: str) -> None:
    r = CHAIN.app.query(abci.RequestQuery(path=f"/{route}{EXTRA}"))
    assert r.code != 0, f"/{route}{EXTRA} answered code 0: {r.value[:80]!r}"
    assert "Traceback" not in r.log


@pytest.mark.parametrize(
    "path", ["/validators/" + "00" * 20, "/supply/loco1xyz", "/market_params/jobs"]
)
def test_the_three_paths_that_ignored_them(path: str) -> None:
    r = CHAIN.app.query(abci.RequestQuery(path=path))
    assert r.code != 0 and "usage" in r.log


@pytest.mark.parametrize("path", ["/validators", "/supply", "/market_params"])
def test_they_still_answer_without(path: str) -> None:
    assert CHAIN.app.query(abci.RequestQuery(path=path)).code == 0


def test_an_unknown_path_is_named_shortened_not_echoed_whole() -> None:
    r = CHAIN.app.query(abci.RequestQuery(path="/nope" + "a" * 100_000))
    assert r.code != 0 and "unknown query path '/nopeaaa" in r.log and len(r.log) < 2_000
