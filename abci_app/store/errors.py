"""Exceptions raised by the store::

StoreError                 anything the store refuses: bad arguments, a commit
 |                         without a staged block, a corrupt database, a malformed proof
 +-- VersionNotAvailable   a read at a height that is pruned or not yet committed
"""

from __future__ import annotations


class StoreError(Exception):
    """Base class of every error raised by abci_app.store."""


class VersionNotAvailable(StoreError):
    """A read asked for a height outside the retained window.

    The message names the requested height and the heights that can be read.
    """

    def __init__(self, height: int, earliest: int, latest: int, keep_recent: int) -> None:
        self.height = height
        self.earliest = earliest
        self.latest = latest
        if height > latest:
            why = f"the latest committed height is {latest}"
        else:
            why = f"it was pruned (keep_recent={keep_recent})"
        super().__init__(
            f"height {height} is not available: {why}; "
            f"this store can read heights {earliest}..{latest}"
        )


def check_bytes(what: str, x: object) -> bytes:
    """``x`` as bytes (a bytearray or memoryview is copied), else a StoreError naming ``what``:
    every key and value the store takes passes here, so a str never reaches SQLite or a hash."""
    if isinstance(x, bytes):
        return x
    if isinstance(x, (bytearray, memoryview)):
        return bytes(x)
    raise StoreError(f"{what} must be bytes, got {type(x).__name__}")
