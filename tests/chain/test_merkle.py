"""Known-answer vectors, proofs and tamper checks for abci_app/merkle.py."""

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abci_app.merkle import (
    CHUNK_SIZE,
    EMPTY_ROOT,
    chunk_bytes,
    hash_leaf,
    hash_node,
    merkle_proof,
    merkle_root,
    merkle_root_of_bytes,
    verify_merkle_proof,
)


def sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


# Known answers, written out (computed once and checked against the independent
# hashlib expressions below).
KAT = {
    0: "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    1: "022a6979e6dab7aa5ae4c3e5e45f7e977112a7e63593820dbec1ec738a24f93c",
    2: "b137985ff484fb600db93107c77b0365c80d78f5b429ded0fd97361d077999eb",
    3: "36642e73c2540ab121e3a6bf9545b0a24982cd830eb13d3cd19de3ce6c021ec1",
}
LEAVES = [b"a", b"b", b"c"]


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_known_answer_roots(n):
    assert merkle_root(LEAVES[:n]).hex() == KAT[n]


def test_known_answers_match_definition():
    la, lb, lc = (sha(b"\x00" + x) for x in LEAVES)
    assert merkle_root([]) == sha(b"") == EMPTY_ROOT
    assert merkle_root([b"a"]) == la
    assert merkle_root([b"a", b"b"]) == sha(b"\x01" + la + lb)
    # odd node (c) promoted unchanged, not duplicated
    assert merkle_root(LEAVES) == sha(b"\x01" + sha(b"\x01" + la + lb) + lc)


def test_five_leaves_known_answer_and_promoted_proof():
    leaves = [bytes([i]) for i in range(5)]
    assert (
        merkle_root(leaves).hex()
        == "b855b42d6c30f5b087e05266783fbd6e394f7b926013ccaa67700a8b0c5a596f"
    )
    # leaf 4 is promoted twice: its proof has a single sibling (root of leaves 0..3)
    proof = merkle_proof(leaves, 4)
    assert [p.hex() for p in proof] == [
        "9bcd51240af4005168f033121ba85be5a6ed4f0e6a5fac262066729b8fbfdecb"
    ]
    assert proof[0] == merkle_root(leaves[:4])
    assert verify_merkle_proof(merkle_root(leaves), leaves[4], 4, 5, proof)


def test_chunked_root_known_answer():
    data = b"\x00" * (2 * CHUNK_SIZE + 1)
    chunks = chunk_bytes(data)
    assert [len(c) for c in chunks] == [CHUNK_SIZE, CHUNK_SIZE, 1]
    assert (
        merkle_root_of_bytes(data).hex()
        == "201f03e482d72e53e53443ebe6a068d64e1a985393c21057a8dc8ef8a15ae191"
    )
    assert merkle_root_of_bytes(b"") == EMPTY_ROOT
    assert chunk_bytes(b"") == []


def test_leaf_and_node_domains_are_separated():
    # a 64-byte leaf equal to two child hashes must not collide with their node
    left, right = hash_leaf(b"x"), hash_leaf(b"y")
    assert hash_leaf(left + right) != hash_node(left, right)
    with pytest.raises(ValueError):
        hash_node(b"short", right)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.binary(max_size=40), min_size=1, max_size=33), st.data())
def test_every_proof_verifies(leaves, data):
    root = merkle_root(leaves)
    for i in range(len(leaves)):
        assert verify_merkle_proof(root, leaves[i], i, len(leaves), merkle_proof(leaves, i))
    i = data.draw(st.integers(0, len(leaves) - 1))
    proof = merkle_proof(leaves, i)
    # wrong index / wrong size / extra or missing siblings fail
    if len(leaves) > 1:
        j = (i + 1) % len(leaves)
        if leaves[j] != leaves[i] or merkle_proof(leaves, j) != proof:
            assert not verify_merkle_proof(root, leaves[i], j, len(leaves), proof)
    assert not verify_merkle_proof(root, leaves[i], i, len(leaves), proof + [b"\x00" * 32])
    if proof:
        assert not verify_merkle_proof(root, leaves[i], i, len(leaves), proof[:-1])


def test_invalid_tampering_any_byte_fails():
    leaves = [bytes([i]) * 7 for i in range(6)]
    root = merkle_root(leaves)
    idx = 3
    proof = merkle_proof(leaves, idx)
    assert verify_merkle_proof(root, leaves[idx], idx, 6, proof)
    # any flipped bit in the leaf data
    for b in range(len(leaves[idx])):
        bad = bytearray(leaves[idx])
        bad[b] ^= 0x01
        assert not verify_merkle_proof(root, bytes(bad), idx, 6, proof)
    # any flipped byte in any proof element
    for k in range(len(proof)):
        for b in range(32):
            bad_proof = list(proof)
            t = bytearray(bad_proof[k])
            t[b] ^= 0x80
            bad_proof[k] = bytes(t)
            assert not verify_merkle_proof(root, leaves[idx], idx, 6, bad_proof)
    # any flipped byte in the root
    for b in range(32):
        t = bytearray(root)
        t[b] ^= 0x01
        assert not verify_merkle_proof(bytes(t), leaves[idx], idx, 6, proof)


def test_invalid_changed_chunk_changes_update_root():
    data = bytearray(range(256)) * 20
    root = merkle_root_of_bytes(bytes(data), chunk_size=1000)
    for pos in (0, 999, 1000, len(data) - 1):
        bad = bytearray(data)
        bad[pos] ^= 0xFF
        assert merkle_root_of_bytes(bytes(bad), chunk_size=1000) != root
    # truncation changes the root too
    assert merkle_root_of_bytes(bytes(data[:-1]), chunk_size=1000) != root


def test_invalid_malformed_inputs_return_false():
    leaves = [b"a", b"b", b"c"]
    root = merkle_root(leaves)
    proof = merkle_proof(leaves, 0)
    assert not verify_merkle_proof(root, b"a", -1, 3, proof)
    assert not verify_merkle_proof(root, b"a", 3, 3, proof)
    assert not verify_merkle_proof(root, b"a", 0, 0, [])
    assert not verify_merkle_proof(root[:31], b"a", 0, 3, proof)
    assert not verify_merkle_proof(root, b"a", 0, 3, [b"x"] * 2)
    assert not verify_merkle_proof(root, b"a", 0, 3, [b"\x00" * 32] * 100)
    with pytest.raises(IndexError):
        merkle_proof(leaves, 3)


# ------------------------------------------------------------------ binding leaf (bound roots)

PROV = bytes(range(20))
BASE = bytes([7]) * 32


def test_binding_leaf_layout_known_answer():
    from abci_app.merkle import binding_leaf

    b = binding_leaf(b"trace", PROV, 1, 2, BASE)
    assert b == b"loconet/trace/v1" + PROV + (1).to_bytes(8, "big") + (2).to_bytes(8, "big") + BASE
    assert len(b) == 84
    assert b.hex() == (
        "6c6f636f6e65742f74726163652f7631000102030405060708090a0b0c0d0e0f1011121300000000000000010000"
        "0000000000020707070707070707070707070707070707070707070707070707070707070707"
    )
    assert binding_leaf(b"update", PROV, 1, 2, BASE).startswith(b"loconet/update/v1" + PROV)


def test_bound_roots_known_answers():
    from abci_app.merkle import binding_leaf

    h = [bytes([i]) * 32 for i in range(3)]
    tb, ub = binding_leaf(b"trace", PROV, 1, 2, BASE), binding_leaf(b"update", PROV, 1, 2, BASE)
    assert (
        merkle_root([tb] + h).hex()
        == "311c87128ca9f98c43b6cd03d0098c22040be3f72f6fab001938dce4ff4e685f"
    )
    assert (
        merkle_root([ub, b"a", b"b"]).hex()
        == "327e712c781a3c8b9fb7d6af62cf39c903d2d54a84965da210770fcfdb891cc2"
    )
    # the binding proof of leaf 0 verifies for this provider only
    proof = merkle_proof([tb] + h, 0)
    assert verify_merkle_proof(merkle_root([tb] + h), tb, 0, 4, proof)
    other = binding_leaf(b"trace", bytes(20), 1, 2, BASE)
    assert not verify_merkle_proof(merkle_root([tb] + h), other, 0, 4, proof)


@pytest.mark.parametrize(
    "args",
    [
        (b"state", PROV, 1, 2, BASE),
        (b"trace", PROV[:19], 1, 2, BASE),
        (b"trace", PROV, 1, 2, BASE[:31]),
        (b"trace", PROV, -1, 2, BASE),
        (b"trace", PROV, 1, 1 << 64, BASE),
    ],
)
def test_invalid_binding_leaf_arguments(args):
    from abci_app.merkle import binding_leaf

    with pytest.raises(ValueError):
        binding_leaf(*args)


# ------------------------------------------------------------------ zero-copy, threaded hashing


@settings(max_examples=80, deadline=None)
@given(
    st.binary(max_size=3000),
    st.integers(1, 700),
    st.integers(1, 5),
    st.lists(st.binary(max_size=90), max_size=2),
)
def test_root_of_bytes_equals_definition_for_every_thread_count(data, chunk_size, workers, head):
    # the fast path (memoryview slices, leaves on `workers` threads) is the definition itself
    expected = merkle_root(head + chunk_bytes(data, chunk_size))
    assert merkle_root_of_bytes(data, chunk_size, head=head, workers=workers) == expected
    assert merkle_root_of_bytes(bytearray(data), chunk_size, head=head) == expected
    assert merkle_root(head + chunk_bytes(data, chunk_size), workers=workers) == expected


def test_parallel_path_known_answer_and_views_are_not_copies():
    from abci_app.merkle import PARALLEL_MIN_BYTES, chunk_views, hash_leaves

    # big enough to take the threaded path by default: same root as one thread, and as the
    # definition written out with hashlib
    data = bytes(range(256)) * ((PARALLEL_MIN_BYTES + 3 * CHUNK_SIZE // 2) // 256)
    views = chunk_views(data)
    assert all(v.obj is data for v in views) and [v.nbytes for v in views][-1] == CHUNK_SIZE // 2
    one = merkle_root_of_bytes(data, workers=1)
    assert merkle_root_of_bytes(data) == one == merkle_root(chunk_bytes(data))
    assert hash_leaves(views) == [sha(b"\x00" + bytes(v)) for v in views]
    assert merkle_root_of_bytes(b"\x00" * (2 * CHUNK_SIZE + 1), workers=3).hex() == (
        "201f03e482d72e53e53443ebe6a068d64e1a985393c21057a8dc8ef8a15ae191"
    )
    with pytest.raises(ValueError):
        merkle_root_of_bytes(data, workers=0)
    with pytest.raises(ValueError):
        chunk_views(data, 0)


def test_verify_refuses_non_bytes_leaf_data():
    leaves = [b"a", b"b", b"c"]
    root = merkle_root(leaves)
    proof = merkle_proof(leaves, 0)
    assert verify_merkle_proof(root, memoryview(b"a"), 0, 3, proof)
    assert not verify_merkle_proof(root, 0, 0, 3, proof)
    assert not verify_merkle_proof(root, None, 0, 3, proof)


def test_bound_tree_layout_is_the_one_everyone_uses():
    """abci_app.merkle owns the layout: binding leaf at 0, entry i at leaf i + 1, the counts;
    the bound leaves reproduce the known roots above."""
    from abci_app.merkle import (
        BINDING_INDEX,
        CHUNK_SIZE,
        bound_trace_leaves,
        bound_update_leaves,
        entry_leaf,
        n_trace_leaves,
        n_update_leaves,
    )

    assert BINDING_INDEX == 0 and [entry_leaf(i) for i in range(3)] == [1, 2, 3]
    assert [n_update_leaves(n) for n in (0, 1, CHUNK_SIZE, CHUNK_SIZE + 1)] == [1, 2, 2, 3]
    assert n_trace_leaves(5) == 6
    h = [bytes([i]) * 32 for i in range(3)]
    tl = bound_trace_leaves(PROV, 1, 2, BASE, h)
    assert (
        merkle_root(tl).hex() == "311c87128ca9f98c43b6cd03d0098c22040be3f72f6fab001938dce4ff4e685f"
    )
    assert len(tl) == n_trace_leaves(3) and tl[entry_leaf(2)] == h[2]
    payload = b"x" * (CHUNK_SIZE + 5)
    ul = bound_update_leaves(PROV, 1, 2, BASE, payload)
    assert len(ul) == n_update_leaves(len(payload)) and ul[entry_leaf(1)] == b"x" * 5
    with pytest.raises(ValueError):
        bound_trace_leaves(PROV, 1, 2, BASE, [b"short"])
