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
