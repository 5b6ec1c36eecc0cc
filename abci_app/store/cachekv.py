"""CacheKV: a write buffer over any KVReader (CheckTx state, block state, one tx).

Writes stay in the buffer until `write()` flushes them into a parent CacheKV, or
the owner hands `writes()` to `MerkleStore.stage`. Reads see the buffer first,
then the parent. Caches nest: a tx cache over a block cache over the store; a
failed tx is undone by `discard()`.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

from .errors import StoreError


class KVReader(Protocol):
    """What a CacheKV needs from its parent; MerkleStore and CacheKV both satisfy it."""

    def get(self, key: bytes) -> bytes | None: ...

    def iterate(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]: ...


class ReadCache:
    """Remembers what ``get`` read from a reader that does not change while it is in use (the
    committed MerkleStore between two commits: the app makes a new one after each Commit and
    restore). CheckTx state sits on it, so the keys every tx reads (auth params, the fee
    collector's balance, accounts) cost one SQLite query per block, not one per CheckTx and
    per recheck. ``iterate`` is passed through. Bounded: cleared past ``capacity`` keys."""

    def __init__(self, parent: KVReader, capacity: int = 100_000) -> None:
        self._parent = parent
        self._values: dict[bytes, bytes | None] = {}
        self._capacity = capacity

    def get(self, key: bytes) -> bytes | None:
        try:
            return self._values[key]
        except KeyError:
            pass
        value = self._parent.get(key)
        if len(self._values) >= self._capacity:
            self._values.clear()
        self._values[key] = value
        return value

    def iterate(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        return self._parent.iterate(start, end)


def _check(what: str, x: object) -> bytes:
    if not isinstance(x, bytes):
        raise StoreError(f"{what} must be bytes, got {type(x).__name__}")
    return x


class CacheKV:
    def __init__(self, parent: KVReader) -> None:
        self._parent = parent
        self._writes: dict[bytes, bytes | None] = {}

    @property
    def parent(self) -> KVReader:
        return self._parent

    def get(self, key: bytes) -> bytes | None:
        if type(key) is not bytes:  # the common case without a call (every read of every tx)
            _check("key", key)
        try:
            return self._writes[key]
        except KeyError:
            return self._parent.get(key)

    def set(self, key: bytes, value: bytes) -> None:
        if type(key) is not bytes or type(value) is not bytes:
            _check("key", key)
            _check("value", value)
        self._writes[key] = value

    def delete(self, key: bytes) -> None:
        self._writes[_check("key", key)] = None

    def iterate(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Merged view of the buffer over the parent, start <= key < end, ascending.

        The buffer is snapshotted when the iterator is created; writes made while
        iterating are not seen by it.
        """
        _check("start", start)
        if end is not None:
            _check("end", end)
        pending = sorted(
            (k, v) for k, v in self._writes.items() if k >= start and (end is None or k < end)
        )
        return _merge(pending, self._parent.iterate(start, end))

    def pending(self, start: bytes, end: bytes | None = None) -> list[tuple[bytes, bytes | None]]:
        """This buffer's own changes with start <= key < end, ascending (None = deleted): what
        it holds over its parent (the same sort of the buffer ``iterate`` does)."""
        _check("start", start)
        if end is not None:
            _check("end", end)
        return sorted(
            (k, v) for k, v in self._writes.items() if k >= start and (end is None or k < end)
        )

    def writes(self) -> dict[bytes, bytes | None]:
        """A copy of the pending changes (None = delete), in key order."""
        return {k: self._writes[k] for k in sorted(self._writes)}

    def write(self) -> None:
        """Flushes the pending changes into the parent CacheKV and empties the buffer."""
        parent = self._parent
        if not isinstance(parent, CacheKV):
            raise StoreError(
                "CacheKV.write: the parent is not a CacheKV; pass writes() to MerkleStore.stage"
            )
        for key in sorted(self._writes):
            value = self._writes[key]
            if value is None:
                parent.delete(key)
            else:
                parent.set(key, value)
        self._writes.clear()

    def discard(self) -> None:
        """Drops the pending changes."""
        self._writes.clear()


def _merge(
    pending: list[tuple[bytes, bytes | None]], below: Iterator[tuple[bytes, bytes]]
) -> Iterator[tuple[bytes, bytes]]:
    i = 0
    for key, value in below:
        while i < len(pending) and pending[i][0] < key:
            k, v = pending[i]
            i += 1
            if v is not None:
                yield k, v
        if i < len(pending) and pending[i][0] == key:
            k, v = pending[i]
            i += 1
            if v is not None:
                yield k, v
            continue
        yield key, value
    for k, v in pending[i:]:
        if v is not None:
            yield k, v
