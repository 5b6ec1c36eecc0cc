"""Membership and non-membership proofs: encoding, verification, tampering."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abci_app.store import EMPTY_HASH, MerkleStore, Proof, StoreError, verify_proof


def _store_with(n: int) -> MerkleStore:
    store = MerkleStore(None)
    store.stage(1, {b"key-%d" % i: b"value-%d" % i for i in range(n)})
    store.commit()
    return store


def _accepts(data: bytes, root: bytes, key: bytes, value: bytes | None) -> bool:
    try:
        proof = Proof.from_bytes(data)
    except StoreError:
        return False
    return verify_proof(proof, root, key, value)


def _flip(data: bytes, i: int, mask: int) -> bytes:
    return data[:i] + bytes((data[i] ^ mask,)) + data[i + 1 :]


def _kinds(store: MerkleStore, keys: list[bytes]) -> dict[str, bytes]:
    """One key of each proof kind: present, absent at an empty subtree, absent at a leaf."""
    found: dict[str, bytes] = {}
    for key in keys:
        proof = store.prove(key)
        if proof.value is not None:
            kind = "member"
        elif proof.leaf is None:
            kind = "absent-empty"
        else:
            kind = "absent-leaf"
        found.setdefault(kind, key)
    return found


def test_every_kind_of_proof_verifies_and_round_trips() -> None:
    store = _store_with(40)
    kinds = _kinds(store, [b"key-%d" % i for i in range(60)] + [b"other-%d" % i for i in range(60)])
    assert set(kinds) == {"member", "absent-empty", "absent-leaf"}
    for key in kinds.values():
        proof = store.prove(key)
        value = store.get(key)
        assert verify_proof(proof, store.app_hash, key, value)
        assert Proof.from_bytes(proof.to_bytes()) == proof
        assert Proof.from_bytes(proof.to_bytes()).to_bytes() == proof.to_bytes()


def test_invalid_flipping_any_byte_of_proof_value_or_root_fails() -> None:
    store = _store_with(40)
    kinds = _kinds(store, [b"key-%d" % i for i in range(60)] + [b"other-%d" % i for i in range(60)])
    root = store.app_hash
    for key in kinds.values():
        value = store.get(key)
        data = store.prove(key).to_bytes()
        assert _accepts(data, root, key, value)
        for i in range(len(data)):
            for mask in (0x01, 0x80, 0xFF):
                assert not _accepts(_flip(data, i, mask), root, key, value), (key, i, mask)
        for i in range(len(root)):
            assert not _accepts(data, _flip(root, i, 0x01), key, value)
        if value is not None:
            for i in range(len(value)):
                assert not _accepts(data, root, key, _flip(value, i, 0x01))
            assert not _accepts(data, root, key, value + b"x")
            assert not _accepts(data, root, key, None)
        else:
            assert not _accepts(data, root, key, b"")
        assert not _accepts(data, root, key + b"x", value)


def test_proofs_at_past_heights_verify_against_that_heights_root() -> None:
    store = MerkleStore(None, keep_recent=10)
    store.stage(1, {b"a": b"1", b"b": b"2"})
    root1 = store.commit()
    store.stage(2, {b"a": b"9", b"b": None, b"c": b"3"})
    root2 = store.commit()
    assert store.root_at(1) == root1
    for key, value in [(b"a", b"1"), (b"b", b"2"), (b"c", None)]:
        proof = store.prove(key, 1)
        assert verify_proof(proof, root1, key, value)
        assert not verify_proof(proof, root2, key, value)
    for key, value in [(b"a", b"9"), (b"b", None), (b"c", b"3")]:
        assert verify_proof(store.prove(key), root2, key, value)
        assert verify_proof(store.prove(key, 2), root2, key, value)


def test_empty_tree_proof() -> None:
    store = MerkleStore(None)
    proof = store.prove(b"anything")
    assert proof == Proof(b"anything", None, (), None)
    assert verify_proof(proof, EMPTY_HASH, b"anything", None)
    assert not verify_proof(proof, EMPTY_HASH, b"anything", b"")


def test_invalid_absence_proof_for_a_present_key() -> None:
    """A leaf of the key itself cannot be passed off as 'another key's leaf'."""
    store = _store_with(10)
    real = store.prove(b"key-3")
    forged = Proof(b"key-3", None, real.siblings, real.leaf)
    assert not verify_proof(forged, store.app_hash, b"key-3", None)
    # an absence proof moved to a key on another path does not verify either
    absent = store.prove(b"missing")
    moved = Proof(b"key-3", None, absent.siblings, absent.leaf)
    assert not verify_proof(moved, store.app_hash, b"key-3", None)


@pytest.mark.parametrize(
    "data",
    [
        b"",
        b"\x02",
        b"\x01\x00\x00\x00\x01k\x00\x00\x00",
        b"\x01\x00\x00\x00\x01k\x02\x00\x00\x00",
        b"\x01\x00\x00\x00\x01k\x00\x02\x00\x00",
        b"\x01\x00\x00\x00\x05k\x00\x00\x00\x00",
        b"\x01\x00\x00\x00\x01k\x00\x00\x00\x00\x00",
        b"\x01\x00\x00\x00\x01k\x00\x00\x01\x01" + bytes(32 * 257),
        b"\x01\x00\x00\x00\x01k\x00\x00\x00\x01" + bytes(31),
    ],
)
def test_invalid_proof_encoding_is_rejected(data: bytes) -> None:
    with pytest.raises(StoreError, match="malformed proof"):
        Proof.from_bytes(data)


def test_invalid_proof_objects_never_raise() -> None:
    store = _store_with(5)
    good = store.prove(b"key-1")
    root = store.app_hash
    bad: list[object] = [
        Proof(b"key-1", b"value-1", (b"short",), good.leaf),
        Proof(b"key-1", b"value-1", good.siblings, (b"x", b"y")),
        Proof(b"key-1", b"value-1", good.siblings + (bytes(32),) * 300, good.leaf),
        Proof(b"key-1", b"value-1", [bytes(32)], good.leaf),  # type: ignore[arg-type]
        Proof(b"key-1", b"value-1", good.siblings, (b"x",)),  # type: ignore[arg-type]
        Proof(b"key-1", 7, good.siblings, good.leaf),  # type: ignore[arg-type]
        "not a proof",
        None,
    ]
    for proof in bad:
        assert verify_proof(proof, root, b"key-1", b"value-1") is False  # type: ignore[arg-type]
    assert verify_proof(good, b"short root", b"key-1", b"value-1") is False
    assert verify_proof(good, root, "key-1", b"value-1") is False  # type: ignore[arg-type]


@settings(max_examples=40, deadline=None)
@given(
    state=st.dictionaries(st.binary(max_size=12), st.binary(max_size=12), max_size=30),
    probe=st.binary(max_size=12),
)
def test_proofs_verify_for_random_states(state: dict[bytes, bytes], probe: bytes) -> None:
    store = MerkleStore(None)
    store.stage(1, dict(state))
    root = store.commit()
    for key in [*state, probe]:
        proof = store.prove(key)
        assert verify_proof(Proof.from_bytes(proof.to_bytes()), root, key, state.get(key))
        wrong = hashlib.sha256(key).digest()
        assert not verify_proof(proof, root, key, wrong)
