"""``tree.build_sorted`` (the store's streamed bulk restore) writes byte for byte the pages, root
and node count that one ``apply_updates`` onto the empty tree writes for the same leaves: any
set of key hashes, including ones that share long prefixes (chains of internal nodes with an
empty side, lone leaves at page roots), and it refuses input out of order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abci_app.store import StoreError
from abci_app.store.tree import EMPTY_REF, apply_updates, build_sorted


def _no_reads(version: int, path: bytes) -> bytes:
    raise AssertionError("building onto the empty tree reads no page")


def _same_as_apply_updates(leaves: dict[bytes, bytes], version: int) -> None:
    ordered = sorted(leaves.items())
    pages: list[tuple[bytes, bytes]] = []
    root, nodes = build_sorted(version, ordered, lambda p, pg: pages.append((p, pg)))
    want = apply_updates(EMPTY_REF, version, ordered, _no_reads)
    assert root == want.root
    assert sorted(pages) == sorted(want.pages)
    assert len({p for p, _ in pages}) == len(pages)  # each page once
    assert nodes == want.nodes_written


# key hashes as a shared base with its first 0-31 bytes kept and a random tail: shared prefixes
# make the deep, narrow shapes (chains of internal nodes with an empty side, lone leaves at page
# roots) that random sha256 outputs almost never give
@settings(max_examples=150, deadline=None)
@given(
    st.binary(min_size=32, max_size=32),
    st.lists(st.tuples(st.integers(0, 31), st.binary(min_size=32, max_size=32)), max_size=60),
    st.integers(1, 2**63 - 1),
)
def test_build_sorted_writes_what_apply_updates_writes(
    base: bytes, tails: list[tuple[int, bytes]], version: int
) -> None:
    leaves = {base[:cut] + tail[cut:]: tail[::-1] for cut, tail in tails}
    _same_as_apply_updates(leaves, version)


def test_build_sorted_on_many_random_leaves() -> None:
    import random

    rng = random.Random(12)
    _same_as_apply_updates({rng.randbytes(32): rng.randbytes(32) for _ in range(3000)}, 9)


def test_build_sorted_refuses_leaves_out_of_order_or_twice() -> None:
    a, b = (b"\x01" * 32, b"\x00" * 32), (b"\x02" * 32, b"\x00" * 32)
    for bad in ([b, a], [a, a], [a, (b"\x03" * 31, b"\x00" * 32)]):
        with pytest.raises(StoreError):
            build_sorted(1, bad, lambda p, pg: None)
    root, nodes = build_sorted(1, [], lambda p, pg: None)
    assert (root, nodes) == (EMPTY_REF, 0)
