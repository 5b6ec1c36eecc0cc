"""The blob exchange's errors: one tree, each class with a stable string ``code``.

    BlobError                       code "blob"
    ├── InvalidHash                 "invalid_hash"    not 64 lowercase hex characters
    ├── BlobNotFound                "not_found"       not in the local store
    ├── QuotaExceeded               "quota_exceeded"  the quota cannot be met without evicting a
    │                                                 pinned blob or one an open round holds
    ├── EvictionNeeded              "eviction_needed" a put needs to evict blobs and the store
    │                                                 was told not to without asking (the CLI)
    ├── FetchError                  a single location failed; the client tries the next one
    │   ├── HashMismatch            "hash_mismatch"   the body's sha256 is not the requested hash
    │   ├── Truncated               "truncated"       fewer bytes than the peer announced
    │   ├── Oversize                "oversize"        more bytes than the caller's limit
    │   ├── PeerTimeout             "timeout"         no byte for timeout_s, or slower than min_rate
    │   └── PeerUnavailable         "unavailable"     connection refused, 404, 5xx, bad answer
    └── FetchFailed                 "fetch_failed"    every location failed (why: ``.attempts``)

Codes are part of the interface (workers log them, tests and the CLI print them): never rename one.
"""

from __future__ import annotations

from typing import ClassVar


class BlobError(Exception):
    code: ClassVar[str] = "blob"

    def __str__(self) -> str:
        return f"{self.code}: {super().__str__()}"


class InvalidHash(BlobError, ValueError):
    code = "invalid_hash"


class BlobNotFound(BlobError, KeyError):
    code = "not_found"

    def __str__(self) -> str:  # KeyError would repr() the message
        return f"{self.code}: {self.args[0] if self.args else ''}"


class QuotaExceeded(BlobError):
    code = "quota_exceeded"


class EvictionNeeded(BlobError):
    """A put would have to evict unpinned, unheld blobs to stay under the quota, and the store's
    ``may_evict`` does not allow those (``loconet blob put|get`` ask first). Nothing was deleted;
    ``victims`` = [(hash, size), ...] that the put would evict, least recently used first."""

    code = "eviction_needed"

    def __init__(self, msg: str, victims: list[tuple[str, int]]) -> None:
        super().__init__(msg)
        self.victims = victims


class FetchError(BlobError):
    """One location failed; ``url`` says which."""

    code = "fetch"

    def __init__(self, msg: str, url: str = "") -> None:
        super().__init__(msg)
        self.url = url


class HashMismatch(FetchError):
    code = "hash_mismatch"


class Truncated(FetchError):
    code = "truncated"


class Oversize(FetchError):
    code = "oversize"


class PeerTimeout(FetchError):
    code = "timeout"


class PeerUnavailable(FetchError):
    code = "unavailable"


class FetchFailed(BlobError):
    """No location delivered the blob; ``attempts`` = [(url, FetchError), ...] in the order
    tried."""

    code = "fetch_failed"

    def __init__(self, blob_hash: str, attempts: list[tuple[str, FetchError]]) -> None:
        self.blob_hash = blob_hash
        self.attempts = attempts
        if attempts:
            why = "; ".join(f"{u}: {e}" for u, e in attempts)
        else:
            why = "no location given"
        super().__init__(
            f"blob {blob_hash} could not be fetched ({why}); try other locations or check that a "
            "peer has it"
        )
