"""Versioned Merkle key-value store: state, app hash, history and proofs.

See README.md in this folder for the design, the on-disk layout and the durability
argument.
"""

from .cachekv import CacheKV, KVReader, ReadCache
from .errors import StoreError, VersionNotAvailable
from .merkle_store import MerkleStore, StoreStats
from .proof import Proof, verify_proof
from .tree import EMPTY_HASH

__all__ = [
    "EMPTY_HASH",
    "CacheKV",
    "KVReader",
    "MerkleStore",
    "Proof",
    "ReadCache",
    "StoreError",
    "StoreStats",
    "VersionNotAvailable",
    "verify_proof",
]
