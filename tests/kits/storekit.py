"""Shared helpers for the store tests: an independent reference root and a model."""

from __future__ import annotations

import hashlib

from abci_app.store import MerkleStore


def _sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def _bit(h: bytes, depth: int) -> int:
    return (h[depth // 8] >> (7 - depth % 8)) & 1


def reference_root(items: dict[bytes, bytes]) -> bytes:
    """The root by the definition, recomputed from scratch (no code shared with the store)."""
    return reference_root_of_hashes({_sha(k): _sha(v) for k, v in items.items()})


def reference_root_of_hashes(leaves: dict[bytes, bytes]) -> bytes:
    """The root of the leaves {sha256(key): sha256(value)}, by the definition."""

    def subtree(depth: int, leaves: list[tuple[bytes, bytes]]) -> bytes:
        if not leaves:
            return bytes(32)
        if len(leaves) == 1:
            return _sha(b"\x00" + leaves[0][0] + leaves[0][1])
        left = [leaf for leaf in leaves if not _bit(leaf[0], depth)]
        right = [leaf for leaf in leaves if _bit(leaf[0], depth)]
        return _sha(b"\x01" + subtree(depth + 1, left) + subtree(depth + 1, right))

    return subtree(0, sorted(leaves.items()))


def apply(model: dict[bytes, bytes], changes: dict[bytes, bytes | None]) -> dict[bytes, bytes]:
    out = dict(model)
    for key, value in changes.items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def model_range(
    model: dict[bytes, bytes], start: bytes, end: bytes | None
) -> list[tuple[bytes, bytes]]:
    return sorted((k, v) for k, v in model.items() if k >= start and (end is None or k < end))


def table_count(store: MerkleStore, table: str) -> int:
    row = store._db.execute(f"SELECT count(*) FROM {table}").fetchone()
    return int(row[0])


def crash_block(height: int) -> dict[bytes, bytes | None]:
    """A deterministic block used by the crash tests (sets, rewrites and deletes)."""
    changes: dict[bytes, bytes | None] = {}
    for i in range(20):
        changes[b"k%03d" % ((height * 11 + i) % 150)] = None
    for i in range(40):
        key = b"k%03d" % ((height * 7 + i) % 150)
        changes[key] = hashlib.sha256(b"%d/%d" % (height, i)).digest()
    return changes
