"""The page layout (schema 3): page rows are well formed and small, a block rewrites whole pages
(nodes it did not change are copied into the new copy), and a damaged page is a StoreError."""

from __future__ import annotations

import hashlib
import random
from pathlib import Path

import pytest

from abci_app.store import MerkleStore, StoreError, verify_proof
from abci_app.store.tree import (
    EMPTY_REF,
    PAGE_SLOTS,
    Counters,
    apply_updates,
    check_page,
    hash_key,
    hash_value,
    page_node,
)
from tests.kits.storekit import reference_root, reference_root_of_hashes


def _state(n: int, tag: bytes = b"") -> dict[bytes, bytes]:
    return {b"key-%d" % i: hashlib.sha256(tag + b"%d" % i).digest() for i in range(n)}


def test_page_rows_are_well_formed_and_fit_an_sqlite_cell() -> None:
    store = MerkleStore(None, keep_recent=3)
    state = _state(3000)
    store.stage(1, state)
    store.commit()
    change = {b"key-%d" % i: b"new" for i in range(0, 3000, 37)}
    store.stage(2, change)
    store.commit()
    state.update(change)
    assert store.app_hash == reference_root(state)
    rows = store._db.execute("SELECT version, path, page FROM pages").fetchall()
    assert rows
    for version, path, page in rows:
        assert check_page(bytes(page)) == page
        assert len(page) <= 2 + PAGE_SLOTS * 83  # 583: no overflow page in a 4 KiB page
        assert int.from_bytes(path[:2], "big") % 3 == 0  # a page starts every 3 levels
        assert version in (1, 2)
    # the block at height 2 rewrote whole pages: its copies hold nodes written at height 1
    # (copied), and every slot a page's internal nodes point to inside the page is present
    for _, _, page in rows:
        for slot in range(PAGE_SLOTS):
            node = page_node(bytes(page), slot)
            if node is not None and node[0] == 1 and 2 * slot + 1 < PAGE_SLOTS:
                for kind, child in ((node[1], 2 * slot + 1), (node[42], 2 * slot + 2)):
                    assert (page_node(bytes(page), child) is not None) == (kind != 0)


@pytest.mark.parametrize(
    "damage",
    [
        lambda p: p[:-1],  # truncated
        lambda p: bytes((p[0] | 0x80,)) + p[1:],  # a slot that does not exist
        lambda p: p[:1] + bytes((p[1] ^ 0x01,)) + p[2:],  # leaf mask disagrees with the nodes
        lambda p: b"",
    ],
)
def test_damaged_page_is_a_store_error(tmp_path: Path, damage) -> None:
    path = tmp_path / "state.db"
    store = MerkleStore(path, node_cache=0)
    store.stage(1, _state(500))
    store.commit()
    root_page = store._db.execute("SELECT page FROM pages WHERE path = ?", (bytes(2),)).fetchone()[
        0
    ]
    store._db.execute(
        "UPDATE pages SET page = ? WHERE path = ?", (damage(bytes(root_page)), bytes(2))
    )
    with pytest.raises(StoreError, match="corrupt"):
        store.prove(b"key-1")
    with pytest.raises(StoreError, match="corrupt"):
        store.stage(2, {b"key-1": b"x"})
    store.close()


def test_past_heights_read_their_own_page_copies() -> None:
    store = MerkleStore(None, keep_recent=10)
    states, roots = [], []
    state = _state(800)
    for h in range(1, 6):
        change: dict[bytes, bytes | None] = {b"key-%d" % i: b"h%d" % h for i in range(h, 800, 50)}
        change.update({b"key-%d" % i: None for i in range(h * 7, 800, 199)})
        store.stage(h, state if h == 1 else change)
        roots.append(store.commit())
        if h > 1:
            state = {k: v for k, v in {**state, **change}.items() if v is not None}
        states.append(dict(state))
    for h in range(1, 6):
        assert roots[h - 1] == reference_root(states[h - 1])
        for key in (b"key-1", b"key-7", b"key-51", b"key-799", b"absent"):
            assert verify_proof(store.prove(key, h), roots[h - 1], key, states[h - 1].get(key))


@pytest.mark.parametrize("seed", range(6))
def test_pages_rewritten_in_place_equal_the_general_path(seed: int) -> None:
    """The fast path (a page whose shape does not change is patched in place) writes the same
    page bytes, stale list, root and hash count as the general path, block after block, over
    rewrites, inserts, deletes (leaves moving up), emptied subtrees and the empty tree."""
    rng = random.Random(seed)
    stored: dict[tuple[int, bytes], bytes] = {}

    def load(version: int, path: bytes) -> bytes:
        return stored[(version, path)]

    live: dict[bytes, bytes] = {}
    root, next_key = EMPTY_REF, 0
    for height in range(1, 40):
        changes: dict[bytes, bytes | None] = {}
        for _ in range(rng.choice((1, 5, 60, 400))):
            r = rng.random()
            if r < 0.35 or not live:
                key, next_key = hash_key(b"k%d" % next_key), next_key + 1
                changes[key] = hash_value(b"%d" % rng.randrange(4))
            elif r < 0.75:
                changes[rng.choice(sorted(live))] = hash_value(b"%d" % rng.randrange(4))
            else:
                changes[rng.choice(sorted(live))] = None
        if height % 13 == 0:  # everything deleted: subtrees empty up to the root
            changes = dict.fromkeys(live)
        present = frozenset(k for k in changes if k in live)
        results = []
        for in_place in (True, False):
            counters = Counters()
            update = apply_updates(
                root, height, list(changes.items()), load, counters, present, in_place
            )
            results.append(
                (
                    update.root,
                    sorted(update.pages),
                    sorted(update.stale),
                    update.nodes_written,
                    counters.hashes,
                )  # fmt: skip
            )
        assert results[0] == results[1], height
        root = results[0][0]
        stored.update({(height, path): page for path, page in results[0][1]})
        for key, value in changes.items():
            if value is None:
                live.pop(key, None)
            else:
                live[key] = value
        assert root.hash == reference_root_of_hashes(live)
