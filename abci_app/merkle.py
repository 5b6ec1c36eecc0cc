"""Binary Merkle trees shared by the chain (abci_app) and the trainer.

Pure hashing: this module imports only ``hashlib``, ``os``, ``concurrent.futures`` and
``collections.abc``; it uses no floats, no clock and no randomness, so the state machine and the
trainer compute the same roots and check the same proofs byte for byte. Large payloads
(``merkle_root_of_bytes`` over at least ``PARALLEL_MIN_BYTES``) hash their chunks on a few
threads (hashlib releases the GIL on big buffers); the result never depends on the
thread count, only the speed does. Leaves are hashed incrementally over ``memoryview``
slices, so no chunk is copied.

Tree definition (version 1)
---------------------------

* ``leaf(d)  = sha256(0x00 || d)`` for each leaf data string ``d`` (any length).
* ``node(l, r) = sha256(0x01 || l || r)`` for two 32-byte child hashes.
* Levels are built bottom-up, pairing hashes left to right. When a level has an odd
  number of hashes, the last one is **promoted unchanged** to the next level (it is not
  duplicated and not re-hashed). This avoids the CVE-2012-2459 duplication ambiguity.
* The root of one leaf is ``leaf(d)`` itself.
* The root of the empty list is ``EMPTY_ROOT = sha256(b"")`` (RFC 6962's convention);
  no non-empty tree can have it as root, because every non-empty root is the sha256 of
  a message that starts with 0x00 or 0x01.

Proofs
------

A proof for leaf ``index`` in a tree of ``n_leaves`` leaves is the list of sibling
hashes (32 bytes each) from the leaf level up, skipping the levels at which the
node on the path is the promoted odd one (it has no sibling there). The verifier
recomputes where those levels are from ``index`` and ``n_leaves``; so a proof is
serialisable as a plain list of 32-byte strings and its length is fixed by
``(index, n_leaves)``.

Chunking
--------

Byte payloads (compressed updates, states) are split into ``CHUNK_SIZE = 1 MiB``
chunks; the last chunk may be shorter. The empty payload has zero chunks, so its root
is ``EMPTY_ROOT``.

Binding leaf (commitments bound to their provider)
--------------------------------------------------

A provider's update root and trace root have, as leaf 0, the binding leaf::

    binding_leaf(kind, provider, job, round, base_model_hash) =
        b"loconet/" + kind + b"/v1" + provider (20 bytes) + job (u64 BE) + round (u64 BE)
        + base_model_hash (32 bytes),          kind in {b"trace", b"update"}

so the update root is ``merkle_root([binding_leaf(b"update", ...)] + payload_chunks)`` and the
trace root ``merkle_root([binding_leaf(b"trace", ...)] + state_hashes)``. The chain checks a
proof of leaf 0 for the signer at submit, so a root copied by another provider is refused.

Bound tree layout (the one definition; chain, trainer, CLI and tests call these)::

    leaf 0                       binding leaf                  (BINDING_INDEX)
    leaf i + 1                   payload chunk i / trace entry i  (entry_leaf(i))
    n_update_leaves(size)      = ceil(size / CHUNK_SIZE) + 1
    n_trace_leaves(n_entries)  = n_entries + 1                 (n_entries = H/k + 1 states)

``bound_update_leaves`` and ``bound_trace_leaves`` return the leaf data in that order.

Known answers (pinned by tests/chain/test_merkle.py)::

    merkle_root([])                 e3b0c442...b855 (sha256 of the empty string)
    merkle_root([b"a"])             022a6979...f93c = sha256(0x00 || b"a")
    merkle_root([b"a", b"b", b"c"]) 36642e73...1ec1
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

__all__ = [
    "BINDING_INDEX",
    "BINDING_KINDS",
    "CHUNK_SIZE",
    "EMPTY_ROOT",
    "ENTRY_OFFSET",
    "HASH_SIZE",
    "MAX_PROOF_LENGTH",
    "PARALLEL_MIN_BYTES",
    "binding_leaf",
    "bound_trace_leaves",
    "bound_update_leaves",
    "chunk_bytes",
    "chunk_views",
    "entry_leaf",
    "hash_leaf",
    "hash_leaves",
    "hash_node",
    "merkle_proof",
    "merkle_root",
    "merkle_root_of_bytes",
    "merkle_root_of_leaf_hashes",
    "n_trace_leaves",
    "n_update_leaves",
    "verify_leaf_hash_proof",
    "verify_merkle_proof",
]

LEAF_PREFIX = b"\x00"
NODE_PREFIX = b"\x01"
HASH_SIZE = 32
CHUNK_SIZE = 1 << 20  # 1 MiB
EMPTY_ROOT = hashlib.sha256(b"").digest()
# A proof never has more siblings than tree levels; 2**64 leaves is far beyond any use.
MAX_PROOF_LENGTH = 64
# Payloads at least this large hash their leaves on several threads (below it the thread
# start-up costs more than it saves). Speed only: the root is the same either way.
PARALLEL_MIN_BYTES = 8 * CHUNK_SIZE
MAX_HASH_THREADS = 8

_sha256 = hashlib.sha256


BINDING_KINDS = (b"trace", b"update", b"probe")  # probe: jobs/probe.py (tolerance mode)
PROVIDER_SIZE = 20


def binding_leaf(
    kind: bytes, provider: bytes, job: int, round_: int, base_model_hash: bytes
) -> bytes:
    """Leaf 0 of a bound update or trace root (pure bytes; see the module docstring).

    Raises ``ValueError`` on an unknown kind, a provider that is not 20 bytes, a base hash
    that is not 32 bytes, or a job/round outside 0..2^64-1.
    """
    if kind not in BINDING_KINDS:
        raise ValueError(f"binding_leaf: kind must be one of {BINDING_KINDS}")
    if len(provider) != PROVIDER_SIZE:
        raise ValueError("binding_leaf: provider must be a 20-byte address")
    if len(base_model_hash) != HASH_SIZE:
        raise ValueError("binding_leaf: base_model_hash must be 32 bytes")
    if not (0 <= job < 1 << 64 and 0 <= round_ < 1 << 64):
        raise ValueError("binding_leaf: job and round must be u64")
    return (
        b"loconet/"
        + bytes(kind)
        + b"/v1"
        + bytes(provider)
        + job.to_bytes(8, "big")
        + round_.to_bytes(8, "big")
        + bytes(base_model_hash)
    )


def hash_leaf(data: bytes | bytearray | memoryview) -> bytes:
    """Return ``sha256(0x00 || data)``, the hash of one leaf (any bytes-like ``data``;
    hashed incrementally, never copied)."""
    h = _sha256(LEAF_PREFIX)
    h.update(data)
    return h.digest()


def _hash_leaf_run(leaves: Sequence[bytes | bytearray | memoryview]) -> list[bytes]:
    out = []
    for d in leaves:
        h = _sha256(LEAF_PREFIX)
        h.update(d)
        out.append(h.digest())
    return out


def _thread_count(n_leaves: int, n_bytes: int, workers: int | None) -> int:
    if workers is None:
        if n_bytes < PARALLEL_MIN_BYTES:
            return 1
        workers = min(os.cpu_count() or 1, MAX_HASH_THREADS)
    if workers < 1:
        raise ValueError("workers must be at least 1")
    return max(1, min(workers, n_leaves))


def hash_leaves(
    leaves: Sequence[bytes | bytearray | memoryview], workers: int | None = None
) -> list[bytes]:
    """Return ``[hash_leaf(d) for d in leaves]``, on up to ``workers`` threads.

    ``workers=None`` picks: one thread below ``PARALLEL_MIN_BYTES`` of leaf data, else one per
    core (at most ``MAX_HASH_THREADS``). Each thread hashes one contiguous run of leaves;
    the output is the same for every ``workers``.
    """
    n = len(leaves)
    n_bytes = sum(map(len, leaves)) if workers is None else 0  # thread choice only
    threads = _thread_count(n, n_bytes, workers)
    if threads == 1:
        return _hash_leaf_run(leaves)
    step = -(-n // threads)
    runs = [leaves[i : i + step] for i in range(0, n, step)]
    # A pool per call: a few threads start in microseconds next to megabytes of hashing,
    # and a fresh pool is safe after fork (a module-level one would not be).
    with ThreadPoolExecutor(max_workers=len(runs), thread_name_prefix="merkle") as pool:
        parts = list(pool.map(_hash_leaf_run, runs))
    return [h for part in parts for h in part]


def hash_node(left: bytes, right: bytes) -> bytes:
    """Return ``sha256(0x01 || left || right)``; both children must be 32 bytes."""
    if len(left) != HASH_SIZE or len(right) != HASH_SIZE:
        raise ValueError("hash_node: children must be 32-byte hashes")
    return hashlib.sha256(NODE_PREFIX + left + right).digest()


def _next_level(level: list[bytes]) -> list[bytes]:
    out = [hash_node(level[i], level[i + 1]) for i in range(0, len(level) - 1, 2)]
    if len(level) % 2 == 1:
        out.append(level[-1])  # odd node promoted unchanged
    return out


def _root_of_hashes(level: list[bytes]) -> bytes:
    while len(level) > 1:
        level = _next_level(level)
    return level[0]


def merkle_root(leaves: Sequence[bytes], workers: int | None = None) -> bytes:
    """Return the 32-byte Merkle root of ``leaves`` (leaf data, not leaf hashes).

    ``merkle_root([]) == EMPTY_ROOT``. ``workers``: see ``hash_leaves`` (speed only).
    """
    if len(leaves) == 0:
        return EMPTY_ROOT
    return _root_of_hashes(hash_leaves(leaves, workers))


def merkle_root_of_leaf_hashes(leaf_hashes: Sequence[bytes]) -> bytes:
    """The root of a tree given its leaf hashes (``hash_leaf`` of each leaf's data): what
    ``merkle_root`` returns for the data, for a caller that knows some leaves only by hash."""
    if len(leaf_hashes) == 0:
        return EMPTY_ROOT
    return _root_of_hashes([bytes(x) for x in leaf_hashes])


def merkle_proof(leaves: Sequence[bytes], index: int) -> list[bytes]:
    """Return the inclusion proof (list of 32-byte sibling hashes) of ``leaves[index]``.

    Raises ``IndexError`` when ``index`` is outside ``0 <= index < len(leaves)``.
    """
    n = len(leaves)
    if not 0 <= index < n:
        raise IndexError(f"merkle_proof: index {index} outside 0..{n - 1}")
    level = [hash_leaf(d) for d in leaves]
    proof: list[bytes] = []
    i = index
    while len(level) > 1:
        sibling = i ^ 1
        if sibling < len(level):
            proof.append(level[sibling])
        # else: i is the promoted odd node of this level, no sibling
        level = _next_level(level)
        i //= 2
    return proof


def verify_merkle_proof(
    root: bytes, leaf_data: bytes, index: int, n_leaves: int, proof: Sequence[bytes]
) -> bool:
    """Return True iff ``proof`` shows ``leaf_data`` at ``index`` in a tree of ``n_leaves``
    leaves whose root is ``root``. Never raises on malformed input; returns False.
    """
    if (
        not isinstance(root, (bytes, bytearray))
        or len(root) != HASH_SIZE
        or not isinstance(index, int)
        or not isinstance(n_leaves, int)
        or not 0 <= index < n_leaves
        or len(proof) > MAX_PROOF_LENGTH
    ):
        return False
    if not isinstance(leaf_data, (bytes, bytearray, memoryview)):
        return False
    return verify_leaf_hash_proof(root, hash_leaf(leaf_data), index, n_leaves, proof)


def verify_leaf_hash_proof(
    root: bytes, leaf_hash: bytes, index: int, n_leaves: int, proof: Sequence[bytes]
) -> bool:
    """``verify_merkle_proof`` for a leaf known only by its hash ``hash_leaf(d)`` (a trace entry
    whose state hash stays secret: docs/threat-model.md *Evidence only re-execution yields*). Never
    raises on malformed input; returns False.
    """
    if (
        not isinstance(root, (bytes, bytearray))
        or len(root) != HASH_SIZE
        or not isinstance(leaf_hash, (bytes, bytearray))
        or len(leaf_hash) != HASH_SIZE
        or not isinstance(index, int)
        or not isinstance(n_leaves, int)
        or not 0 <= index < n_leaves
        or len(proof) > MAX_PROOF_LENGTH
    ):
        return False
    h = bytes(leaf_hash)
    i, width, used = index, n_leaves, 0
    while width > 1:
        sibling = i ^ 1
        if sibling < width:
            if used >= len(proof):
                return False
            s = proof[used]
            if not isinstance(s, (bytes, bytearray)) or len(s) != HASH_SIZE:
                return False
            used += 1
            h = hash_node(h, bytes(s)) if i % 2 == 0 else hash_node(bytes(s), h)
        i //= 2
        width = (width + 1) // 2
    return used == len(proof) and h == bytes(root)


def chunk_bytes(data: bytes, chunk_size: int = CHUNK_SIZE) -> list[bytes]:
    """Split ``data`` into ``chunk_size`` pieces (the last may be shorter; b"" -> [])."""
    if chunk_size <= 0:
        raise ValueError("chunk_bytes: chunk_size must be positive")
    return [bytes(data[i : i + chunk_size]) for i in range(0, len(data), chunk_size)]


def chunk_views(
    data: bytes | bytearray | memoryview, chunk_size: int = CHUNK_SIZE
) -> list[memoryview]:
    """``chunk_bytes`` without the copies: read-only ``memoryview`` slices of ``data``."""
    if chunk_size <= 0:
        raise ValueError("chunk_views: chunk_size must be positive")
    view = memoryview(data).cast("B").toreadonly()
    return [view[i : i + chunk_size] for i in range(0, len(view), chunk_size)]


def merkle_root_of_bytes(
    data: bytes | bytearray | memoryview,
    chunk_size: int = CHUNK_SIZE,
    head: Sequence[bytes] = (),
    workers: int | None = None,
) -> bytes:
    """Root over the 1 MiB chunks of ``data`` (the update root of a payload).

    Equal to ``merkle_root(list(head) + chunk_bytes(data, chunk_size))`` (``head``: leaves
    placed before the chunks, e.g. the binding leaf of a bound update root), computed over
    memoryview slices (no chunk is copied) with the chunks hashed on several threads when
    ``data`` is at least ``PARALLEL_MIN_BYTES`` (``workers`` overrides; speed only).
    """
    chunks = chunk_views(data, chunk_size)
    if not head and not chunks:
        return EMPTY_ROOT
    n_bytes = sum(c.nbytes for c in chunks)
    threads = _thread_count(len(chunks), n_bytes, workers) if chunks else 1
    return _root_of_hashes(_hash_leaf_run(head) + hash_leaves(chunks, threads))


# ---------------------------------------------------------------- bound tree layout

BINDING_INDEX = 0  # the binding leaf
ENTRY_OFFSET = 1  # payload chunk i / trace entry i is leaf i + ENTRY_OFFSET


def entry_leaf(i: int) -> int:
    """Leaf index of payload chunk ``i`` or trace entry ``i`` in a bound tree."""
    return i + ENTRY_OFFSET


def n_update_leaves(payload_size: int) -> int:
    """Leaves of a bound update tree: the binding leaf + ceil(payload_size / CHUNK_SIZE) chunks."""
    return (payload_size + CHUNK_SIZE - 1) // CHUNK_SIZE + ENTRY_OFFSET


def n_trace_leaves(n_entries: int) -> int:
    """Leaves of a bound trace tree: the binding leaf + ``n_entries`` state hashes (H/k + 1)."""
    return n_entries + ENTRY_OFFSET


def bound_update_leaves(
    provider: bytes, job: int, round_: int, base_model_hash: bytes, payload: bytes
) -> list[bytes]:
    """Leaf data of a bound update tree: ``binding_leaf(b"update", ...)``, then the chunks."""
    return [binding_leaf(b"update", provider, job, round_, base_model_hash)] + chunk_bytes(payload)


def bound_trace_leaves(
    provider: bytes, job: int, round_: int, base_model_hash: bytes, state_hashes: Sequence[bytes]
) -> list[bytes]:
    """Leaf data of a bound trace tree: ``binding_leaf(b"trace", ...)``, then the 32-byte state
    hashes. Raises ``ValueError`` when an entry is not 32 bytes."""
    if any(len(x) != HASH_SIZE for x in state_hashes):
        raise ValueError("bound_trace_leaves: trace entries must be 32-byte state hashes")
    return [binding_leaf(b"trace", provider, job, round_, base_model_hash)] + [
        bytes(x) for x in state_hashes
    ]
