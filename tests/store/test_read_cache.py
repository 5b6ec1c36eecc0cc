"""ReadCache (the CheckTx state's view of the committed store): reads are remembered until the
app makes a new one at Commit, so a CheckTx after a block sees that block's writes."""

from __future__ import annotations

from abci_app.pb import abci
from abci_app.store import CacheKV, MerkleStore, ReadCache
from tests.kits.chainkit import new_chain, send_msg


def test_get_is_remembered_iterate_passes_through_and_capacity_bounds():
    s = MerkleStore(None)
    s.stage(1, {b"a": b"1", b"b": b"2"})
    s.commit()
    rc = ReadCache(s, capacity=2)
    assert rc.get(b"a") == b"1" and rc.get(b"zz") is None
    s.stage(2, {b"a": b"9"})
    s.commit()
    assert rc.get(b"a") == b"1"  # remembered: the app replaces the cache at every Commit
    assert ReadCache(s).get(b"a") == b"9"
    assert list(rc.iterate(b"a", b"c")) == [(b"a", b"9"), (b"b", b"2")]  # not cached
    rc.get(b"b")  # a third key: the cache is cleared, then holds b
    assert rc.get(b"a") == b"9"
    assert list(CacheKV(rc).iterate(b"a")) == [(b"a", b"9"), (b"b", b"2")]


def test_check_tx_after_a_block_sees_the_block():
    c = new_chain(n_keys=2)
    a, b = c.keys
    assert c.check(c.tx(a, [send_msg(b.address, 5)])).code == 0  # CheckTx reads a's account
    c.block([c.tx(a, [send_msg(b.address, 5)])])
    # the same sequence again: refused (the committed sequence moved on), the next one accepted
    assert c.check(c.tx(a, [send_msg(b.address, 5)], seq=0)).code != 0
    assert c.check(c.tx(a, [send_msg(b.address, 5)], seq=1)).code == 0
    recheck = abci.RequestCheckTx(
        tx=c.tx(a, [send_msg(b.address, 5)], seq=1), type=abci.CheckTxType.Value("RECHECK")
    )
    c.block([c.tx(a, [send_msg(b.address, 5)], seq=1)])
    assert c.app.check_tx(recheck).code != 0  # evicted on recheck: its sequence was taken
