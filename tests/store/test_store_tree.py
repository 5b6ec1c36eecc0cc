"""MerkleStore against a dict model: reads, history, roots, reopening."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abci_app.store import EMPTY_HASH, CacheKV, MerkleStore, StoreError, verify_proof
from tests.kits.storekit import apply, model_range, reference_root

# Known answers, computed by hand from the definition in tree.py (see README.md):
# sha256("alice") starts 0b00..., sha256("carol") 0b01..., sha256("bob") 0b1...,
# so the 3-key tree is internal(internal(leaf alice, leaf carol), leaf bob).
KAT_EMPTY = "00" * 32
KAT_ONE = "e88595db6e2373140c77336108e543dd79e1c6420dff08568b120417c8af88b5"
KAT_THREE = "b5676771f809fdd78b56814738d0645e6341c39427f0812a5e6cb4e580f0e1ce"
ONE = {b"alice": b"100"}
THREE = {b"alice": b"100", b"bob": b"200", b"carol": b"300"}


def test_known_answer_roots() -> None:
    assert reference_root({}).hex() == KAT_EMPTY
    assert reference_root(ONE).hex() == KAT_ONE
    assert reference_root(THREE).hex() == KAT_THREE
    store = MerkleStore(None)
    assert store.height == 0
    assert store.app_hash == EMPTY_HASH == bytes.fromhex(KAT_EMPTY)
    assert store.stage(1, dict(ONE)).hex() == KAT_ONE
    assert store.commit().hex() == KAT_ONE
    assert store.stage(2, {b"carol": b"300", b"bob": b"200"}).hex() == KAT_THREE
    store.commit()
    assert (store.height, store.app_hash.hex()) == (2, KAT_THREE)
    store.stage(3, {b"alice": None, b"bob": None, b"carol": None})
    assert store.commit() == EMPTY_HASH


def test_stage_does_not_persist_and_can_be_replaced() -> None:
    store = MerkleStore(None)
    store.stage(1, {b"k": b"first"})
    assert store.get(b"k") is None
    assert store.height == 0
    assert store.app_hash == EMPTY_HASH
    root = store.stage(1, {b"k": b"second"})  # CometBFT re-ran the block
    assert store.commit() == root
    assert store.get(b"k") == b"second"


def test_empty_block_advances_height_with_same_root() -> None:
    store = MerkleStore(None)
    store.stage(1, {b"a": b"1"})
    root = store.commit()
    assert store.stage(2, {}) == root
    assert store.commit() == root
    assert store.height == 2
    assert store.get_at(b"a", 1) == b"1"


def test_noop_changes_leave_root_unchanged() -> None:
    store = MerkleStore(None)
    store.stage(1, dict(THREE))
    root = store.commit()
    assert store.stage(2, {b"missing": None, b"alice": b"100"}) == root
    store.commit()
    assert store.stats.changed_keys == 0
    assert store.stats.nodes_written == 0


def test_empty_value_is_present_and_empty_key_is_a_key() -> None:
    store = MerkleStore(None)
    store.stage(1, {b"": b"root", b"e": b""})
    store.commit()
    assert store.get(b"") == b"root"
    assert store.get(b"e") == b""
    assert list(store.iterate(b"")) == [(b"", b"root"), (b"e", b"")]
    assert verify_proof(store.prove(b"e"), store.app_hash, b"e", b"")
    assert not verify_proof(store.prove(b"e"), store.app_hash, b"e", None)


def test_invalid_stage_height() -> None:
    store = MerkleStore(None)
    with pytest.raises(StoreError, match="height must be 1"):
        store.stage(2, {})
    with pytest.raises(StoreError, match="nothing staged"):
        store.commit()


def test_invalid_key_type() -> None:
    store = MerkleStore(None)
    with pytest.raises(StoreError, match="key must be bytes"):
        store.stage(1, {"text": b"x"})  # type: ignore[dict-item]
    with pytest.raises(StoreError, match="value must be bytes"):
        store.stage(1, {b"k": 5})  # type: ignore[dict-item]


def test_iterate_bounds_are_bytewise_half_open() -> None:
    keys = [b"", b"a", b"a\x00", b"ab", b"b", b"\xff", b"\xff\xff"]
    store = MerkleStore(None)
    store.stage(1, {k: b"v" + k for k in keys})
    store.commit()
    model = {k: b"v" + k for k in keys}
    for start in keys + [b"\x00", b"aa"]:
        for end in [None, *keys, b"zz"]:
            assert list(store.iterate(start, end)) == model_range(model, start, end)


def test_iterate_pages_through_many_keys() -> None:
    store = MerkleStore(None)
    model = {i.to_bytes(3, "big"): i.to_bytes(4, "big") for i in range(1500)}
    store.stage(1, dict(model))
    store.commit()
    store.stage(2, dict.fromkeys(list(model)[::3]))
    store.commit()
    assert list(store.iterate_at(1, b"")) == model_range(model, b"", None)
    now = {k: v for i, (k, v) in enumerate(model.items()) if i % 3}
    assert list(store.iterate(b"")) == model_range(now, b"", None)
    assert list(store.iterate(b"\x00\x02", b"\x00\x05")) == model_range(
        now, b"\x00\x02", b"\x00\x05"
    )


def test_reopen_from_disk(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    store = MerkleStore(path, keep_recent=10)
    store.stage(1, dict(THREE))
    store.commit()
    store.stage(2, {b"bob": None, b"dave": b"400"})
    root = store.commit()
    store.close()
    again = MerkleStore(path, keep_recent=10)
    assert (again.height, again.app_hash) == (2, root)
    assert again.get(b"dave") == b"400"
    assert again.get_at(b"bob", 1) == b"200"
    assert again.root_at(1).hex() == KAT_THREE
    again.stage(3, {b"erin": b"500"})
    again.commit()
    again.close()


KEYS = [b"", b"a", b"a\x00", b"ab", b"b", b"ba", b"c", b"k" * 300, b"\x7f", b"\x80", b"\xff"]
key_st = st.sampled_from(KEYS)
value_st = st.binary(max_size=6)
tx_st = st.dictionaries(key_st, st.none() | value_st, max_size=5)
# a block is a list of (tx changes, whether the tx succeeds)
block_st = st.lists(st.tuples(tx_st, st.booleans()), max_size=4)
range_st = st.tuples(key_st, st.none() | key_st)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks=st.lists(block_st, min_size=1, max_size=10), ranges=st.lists(range_st, max_size=3))
def test_store_matches_dict_model(
    blocks: list[list[tuple[dict[bytes, bytes | None], bool]]],
    ranges: list[tuple[bytes, bytes | None]],
) -> None:
    keep = 3
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "state.db"
        store = MerkleStore(path, keep_recent=keep)
        merged = MerkleStore(None)  # same blocks, each as one plain dict in reverse order
        models: list[dict[bytes, bytes]] = [{}]
        roots = [EMPTY_HASH]
        for height, txs in enumerate(blocks, start=1):
            block = CacheKV(store)
            flat: dict[bytes, bytes | None] = {}
            for changes, ok in txs:
                tx = CacheKV(block)
                for key, value in changes.items():
                    if value is None:
                        tx.delete(key)
                    else:
                        tx.set(key, value)
                if ok:
                    tx.write()
                    flat.update(changes)
                else:
                    tx.discard()
            model = apply(models[-1], flat)
            assert list(block.iterate(b"")) == model_range(model, b"", None)
            root = store.stage(height, block.writes())
            assert root == reference_root(model)
            assert store.commit() == root
            assert merged.stage(height, dict(reversed(list(flat.items())))) == root
            merged.commit()
            models.append(model)
            roots.append(root)

            assert (store.height, store.app_hash) == (height, root)
            for key in KEYS:
                assert store.get(key) == model.get(key)
            for start, end in ranges:
                assert list(store.iterate(start, end)) == model_range(model, start, end)
            for past in range(max(0, height - keep + 1), height + 1):
                assert store.root_at(past) == roots[past]
                for key in KEYS:
                    assert store.get_at(key, past) == models[past].get(key)
                    proof = store.prove(key, past)
                    assert verify_proof(proof, roots[past], key, models[past].get(key))
                for start, end in ranges:
                    got = list(store.iterate_at(past, start, end))
                    assert got == model_range(models[past], start, end)

        # a fresh store given the final state in one block reaches the same root
        fresh = MerkleStore(None)
        assert fresh.stage(1, dict(sorted(models[-1].items(), reverse=True))) == roots[-1]
        store.close()
        again = MerkleStore(path, keep_recent=keep)
        assert (again.height, again.app_hash) == (len(blocks), roots[-1])
        assert list(again.iterate(b"")) == model_range(models[-1], b"", None)
        for past in range(max(0, again.height - keep + 1), again.height + 1):
            assert list(again.iterate_at(past, b"")) == model_range(models[past], b"", None)
        again.close()


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.dictionaries(
            st.sampled_from([b"k%d" % i for i in range(40)]),
            st.one_of(st.none(), st.binary(max_size=3)),
            max_size=12,
        ),
        min_size=1,
        max_size=8,
    )
)
def test_node_cache_size_never_changes_roots_or_proofs(
    blocks: list[dict[bytes, bytes | None]],
) -> None:
    # no cache, a cache that evicts all the time, and the default: the same roots and proofs
    # (the cache holds the latest node per path; a hit counts only for the version asked for)
    stores = [MerkleStore(None, keep_recent=3, node_cache=n) for n in (0, 3, 1_000_000)]
    model: dict[bytes, bytes] = {}
    for h, changes in enumerate(blocks, start=1):
        roots = {s.stage(h, changes) for s in stores}
        assert len(roots) == 1
        model = apply(model, changes)
        assert roots == {reference_root(model)}
        for s in stores:
            s.commit()
        for past in range(stores[0].earliest_height, h + 1):
            for key in (b"k0", b"k7", b"k39"):
                proofs = [s.prove(key, past) for s in stores]
                assert len({p.to_bytes() for p in proofs}) == 1
                assert verify_proof(
                    proofs[0], stores[0].root_at(past), key, stores[0].get_at(key, past)
                )
