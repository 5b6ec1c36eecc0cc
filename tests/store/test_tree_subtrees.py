"""``tree.subtree_summary`` and ``tree.fold_summaries`` (the state-sync chunks' checks): any state
cut at any depth folds back to the store's own root, and the compact form's moves are exact."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abci_app.store import MerkleStore
from abci_app.store.tree import (
    EMPTY_HASH,
    KIND_EMPTY,
    KIND_INTERNAL,
    KIND_LEAF,
    compute_internal_hash,
    compute_leaf_hash,
    fold_summaries,
    hash_key,
    hash_value,
    subtree_summary,
)


def _cut(state: dict[bytes, bytes], depth: int) -> list[list[tuple[bytes, bytes]]]:
    buckets: list[list[tuple[bytes, bytes]]] = [[] for _ in range(1 << depth)]
    for kh, vh in sorted((hash_key(k), hash_value(v)) for k, v in state.items()):
        buckets[int.from_bytes(kh, "big") >> (256 - depth)].append((kh, vh))
    return buckets


@settings(max_examples=80, deadline=None)
@given(
    st.dictionaries(st.binary(min_size=1, max_size=8), st.binary(max_size=8), max_size=80),
    st.integers(min_value=0, max_value=9),
)
def test_any_cut_folds_to_the_stores_root(state: dict[bytes, bytes], depth: int) -> None:
    root = MerkleStore(None).stage(1, state) if state else EMPTY_HASH
    summaries = [subtree_summary(b, depth) for b in _cut(state, depth)]
    kind, h = fold_summaries(summaries)
    assert h == root
    assert kind == (KIND_EMPTY, KIND_LEAF, KIND_INTERNAL)[min(len(state), 2)]


def test_a_lone_leaf_moves_up_and_two_keys_make_an_internal_node() -> None:
    leaf = (KIND_LEAF, compute_leaf_hash(b"\x01" * 32, b"\x02" * 32))
    empty = (KIND_EMPTY, EMPTY_HASH)
    assert fold_summaries([empty, leaf, empty, empty]) == leaf
    assert fold_summaries([empty, empty, empty, empty]) == empty
    inner = (KIND_INTERNAL, compute_internal_hash(leaf[1], EMPTY_HASH))
    assert fold_summaries([inner, empty]) == (
        KIND_INTERNAL,
        compute_internal_hash(inner[1], EMPTY_HASH),
    )
    assert fold_summaries([leaf, leaf]) == (
        KIND_INTERNAL,
        compute_internal_hash(leaf[1], leaf[1]),
    )
    with pytest.raises(ValueError):
        fold_summaries([leaf, empty, empty])
    with pytest.raises(ValueError):
        fold_summaries([])
