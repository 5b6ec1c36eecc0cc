"""CacheKV: layered write buffers over the store."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abci_app.store import CacheKV, KVReader, MerkleStore, StoreError
from tests.kits.storekit import model_range


def _store() -> MerkleStore:
    store = MerkleStore(None)
    store.stage(1, {b"a": b"1", b"b": b"2", b"c": b"3"})
    store.commit()
    return store


def test_reads_see_own_writes_then_parent() -> None:
    store = _store()
    cache = CacheKV(store)
    cache.set(b"b", b"20")
    cache.delete(b"c")
    cache.set(b"d", b"4")
    assert [cache.get(k) for k in (b"a", b"b", b"c", b"d", b"e")] == [b"1", b"20", None, b"4", None]
    assert list(cache.iterate(b"")) == [(b"a", b"1"), (b"b", b"20"), (b"d", b"4")]
    assert list(cache.iterate(b"b", b"d")) == [(b"b", b"20")]
    assert store.get(b"b") == b"2"  # nothing reaches the store
    assert cache.writes() == {b"b": b"20", b"c": None, b"d": b"4"}


def test_nested_write_and_discard() -> None:
    store = _store()
    block = CacheKV(store)
    ok = CacheKV(block)
    ok.set(b"x", b"1")
    ok.delete(b"a")
    failed = CacheKV(block)
    failed.set(b"y", b"2")
    ok.write()
    failed.discard()
    assert ok.writes() == {}
    assert failed.writes() == {}
    assert block.writes() == {b"a": None, b"x": b"1"}
    root = store.stage(2, block.writes())
    assert store.commit() == root
    assert list(store.iterate(b"")) == [(b"b", b"2"), (b"c", b"3"), (b"x", b"1")]


def test_invalid_write_into_the_store() -> None:
    cache = CacheKV(_store())
    cache.set(b"k", b"v")
    with pytest.raises(StoreError, match="pass writes"):
        cache.write()


def test_invalid_types() -> None:
    cache = CacheKV(_store())
    with pytest.raises(StoreError):
        cache.set("k", b"v")  # type: ignore[arg-type]
    with pytest.raises(StoreError):
        cache.set(b"k", None)  # type: ignore[arg-type]


def test_protocol_is_satisfied() -> None:
    readers: list[KVReader] = [_store(), CacheKV(_store())]
    assert [r.get(b"a") for r in readers] == [b"1", b"1"]


KEY = st.binary(max_size=3)
OPS = st.lists(st.tuples(KEY, st.none() | st.binary(max_size=3)), max_size=20)


@settings(max_examples=60, deadline=None)
@given(
    base=st.dictionaries(KEY, st.binary(max_size=3), max_size=10), layers=st.lists(OPS, max_size=3)
)
def test_layers_match_a_dict(
    base: dict[bytes, bytes], layers: list[list[tuple[bytes, bytes | None]]]
) -> None:
    store = MerkleStore(None)
    store.stage(1, dict(base))
    store.commit()
    model = dict(base)
    parent: KVReader = store
    for ops in layers:
        cache = CacheKV(parent)
        for key, value in ops:
            if value is None:
                cache.delete(key)
                model.pop(key, None)
            else:
                cache.set(key, value)
                model[key] = value
        parent = cache
        assert list(cache.iterate(b"")) == model_range(model, b"", None)
        assert list(cache.iterate(b"\x01", b"\x80")) == model_range(model, b"\x01", b"\x80")
        for key in {*base, *model, b"\x00"}:
            assert cache.get(key) == model.get(key)
