"""Canonical state/model layout, commitments (update root, trace root, proofs)."""

import hashlib

import pytest
import torch

from trainer.commit import (
    KIND_STATE,
    KIND_UPDATE,
    PayloadError,
    chunk_proof,
    decode,
    decode_meta,
    encode,
    trace_proof,
    trace_root,
    update_root,
    verify_chunk,
    verify_trace_entry,
)
from trainer.compression import CompressionState, make_codec
from trainer.model import init_model
from trainer.state import (
    InnerConfig,
    load_state,
    make_inner_optimizer,
    model_hash,
    params_hash_of_state,
    run_inner_steps,
    state_bytes,
)


def test_state_round_trip_is_byte_identical(corpus, tiny_cfg):
    from trainer.data import ShardSpec

    icfg = InnerConfig()
    m = init_model(tiny_cfg, 0)
    opt = make_inner_optimizer(m, icfg)
    spec = ShardSpec(
        dataset_id=corpus.id, seed=0, job=0, round=0, provider="p", block_size=tiny_cfg.block_size
    )
    run_inner_steps(m, opt, icfg, corpus, spec, 0, 3)
    b = state_bytes(m, opt, icfg, round=0, inner_step=3, shard=0)
    ls = load_state(b)
    assert ls.to_bytes() == b
    assert params_hash_of_state(b) == model_hash(m)
    # the header alone: the same meta, the same refusals, without reading the tensors
    assert decode_meta(b, expected_kind=KIND_STATE) == decode(b).meta
    assert decode_meta(b[:1000]) == decode(b).meta  # the tensors are not read
    for bad in (b"XXXX" + b[4:], b[:10]):
        with pytest.raises(PayloadError):
            decode_meta(bad)
    with pytest.raises(PayloadError):
        decode_meta(b, expected_kind=KIND_UPDATE)
    p = decode(b, expected_kind=KIND_STATE)
    assert p.meta["adam_step"] == 3 and set(next(iter(p.entries.values())).parts) == {
        "param",
        "exp_avg",
        "exp_avg_sq",
    }


def test_model_hash_is_deterministic_and_sensitive(tiny_cfg):
    a, b = init_model(tiny_cfg, 0), init_model(tiny_cfg, 0)
    assert model_hash(a) == model_hash(b)
    assert model_hash(init_model(tiny_cfg, 1)) != model_hash(a)
    with torch.no_grad():
        next(b.parameters()).view(-1)[0] += 1e-7
    assert model_hash(a) != model_hash(b)


def test_invalid_state_as_update_kind():
    t = {"w": torch.randn(4, 4)}
    raw = encode(make_codec("none").compress(t, CompressionState()))
    with pytest.raises(PayloadError, match="expected a state"):
        decode(raw, expected_kind=KIND_STATE)
    assert decode(raw, expected_kind=KIND_UPDATE).codec == "dense"


def test_update_root_and_chunk_proofs_multi_chunk():
    t = {"w": torch.randn(700_000)}  # 2.8 MB -> 3 chunks
    raw = encode(make_codec("none").compress(t, CompressionState()))
    root = update_root(raw)
    for i in range(3):
        chunk, proof, n = chunk_proof(raw, i)
        assert n == 3
        assert verify_chunk(root, chunk, i, n, proof)
        bad = bytearray(chunk)
        bad[len(bad) // 2] ^= 1
        assert not verify_chunk(root, bytes(bad), i, n, proof)
    tampered = bytearray(raw)
    tampered[-1] ^= 1
    assert update_root(bytes(tampered)) != root


def test_trace_root_and_entry_proofs():
    hashes = [hashlib.sha256(bytes([i])).digest() for i in range(7)]
    root = trace_root(hashes)
    for i, h in enumerate(hashes):
        proof = trace_proof(hashes, i)
        assert verify_trace_entry(root, h, i, 7, proof)
        assert not verify_trace_entry(root, hashes[(i + 1) % 7], i, 7, proof)
    assert not verify_trace_entry(root, b"short", 0, 7, trace_proof(hashes, 0))
    with pytest.raises(ValueError):
        trace_root([b"x" * 31])


def test_trace_root_known_answer():
    # leaf data = 32-byte state hashes; leaf = sha256(0x00||h), node = sha256(0x01||l||r)
    h = [bytes([i]) * 32 for i in range(3)]
    leaves = [hashlib.sha256(b"\x00" + x).digest() for x in h]
    expected = hashlib.sha256(
        b"\x01" + hashlib.sha256(b"\x01" + leaves[0] + leaves[1]).digest() + leaves[2]
    ).digest()
    assert trace_root(h) == expected


def test_bound_roots_verify_with_abci_app_merkle():
    """The trainer's bound roots are what the chain checks: leaf 0 = binding_leaf (submit),
    entry i = leaf i + 1 (reveal), with abci_app.merkle alone."""
    from abci_app.merkle import CHUNK_SIZE, binding_leaf, merkle_root, verify_merkle_proof
    from trainer.commit import Binding, binding_proof

    b = Binding(bytes(range(20)), 3, 4, hashlib.sha256(b"base").digest())
    t = {"w": torch.randn(700_000)}  # 3 chunks
    raw = encode(make_codec("none").compress(t, CompressionState()))
    root = update_root(raw, b)
    assert root != update_root(raw)
    n = (len(raw) + CHUNK_SIZE - 1) // CHUNK_SIZE + 1  # what the chain computes
    leaf0 = binding_leaf(b"update", b.provider, 3, 4, b.base_model_hash)
    assert verify_merkle_proof(root, leaf0, 0, n, binding_proof(b"update", raw, b))
    for i in range(n - 1):
        chunk, proof, nc = chunk_proof(raw, i, b)
        assert nc == n - 1 and verify_chunk(root, chunk, i, nc, proof, bound=True)
        assert verify_merkle_proof(root, chunk, i + 1, n, proof)
    # another provider's binding does not verify under this root
    other = binding_leaf(b"update", bytes(20), 3, 4, b.base_model_hash)
    assert not verify_merkle_proof(root, other, 0, n, binding_proof(b"update", raw, b))

    hashes = [hashlib.sha256(bytes([i])).digest() for i in range(5)]
    troot = trace_root(hashes, b)
    tleaf0 = binding_leaf(b"trace", b.provider, 3, 4, b.base_model_hash)
    assert troot == merkle_root([tleaf0] + hashes)
    assert verify_merkle_proof(troot, tleaf0, 0, 6, binding_proof(b"trace", hashes, b))
    for i, hh in enumerate(hashes):
        proof = trace_proof(hashes, i, b)
        assert verify_merkle_proof(troot, hh, i + 1, 6, proof)
        assert verify_trace_entry(troot, hh, i, 5, proof, bound=True)
        assert not verify_trace_entry(troot, hh, i, 5, proof)


def test_bound_trace_root_known_answer():
    from trainer.commit import Binding

    h = [bytes([i]) * 32 for i in range(3)]
    b = Binding(bytes(range(20)), 1, 2, bytes([7]) * 32)
    # same vector as tests/chain/test_merkle.py::test_bound_roots_known_answers
    assert (
        trace_root(h, b).hex() == "311c87128ca9f98c43b6cd03d0098c22040be3f72f6fab001938dce4ff4e685f"
    )


def test_a_cached_table_does_not_hide_a_defect():
    """decode skips parsing a tensor table byte-equal to one it parsed lately: a state whose
    table or data differ from a cached one is still parsed and refused as before."""
    from trainer.commit import KIND_STATE, PayloadError, decode
    from trainer.model import GPT, GPTConfig
    from trainer.state import InnerConfig, make_inner_optimizer, state_bytes

    m = GPT(GPTConfig.preset("tiny"))
    icfg = InnerConfig()
    good = state_bytes(m, make_inner_optimizer(m, icfg), icfg, round=0, inner_step=0, shard=0)
    a = decode(good, expected_kind=KIND_STATE)
    b = decode(good, expected_kind=KIND_STATE)  # the table is now cached
    assert a.meta == b.meta and all(
        torch.equal(a.entries[n].parts[p], b.entries[n].parts[p])
        for n in a.entries
        for p in a.entries[n].parts
    )
    with pytest.raises(PayloadError, match="truncated|trailing"):
        decode(good[:-4], expected_kind=KIND_STATE)
    with pytest.raises(PayloadError, match="trailing"):
        decode(good + b"\x00" * 4, expected_kind=KIND_STATE)
    # one dims byte of the table changed: not the cached table, parsed and refused
    meta_end = good.index(b"}") + 1
    i = good.index(b"\x00\x00\x00\x00\x00\x00\x00", meta_end + 4)
    bad = good[:i] + b"\x01" + good[i + 1 :]
    with pytest.raises(PayloadError):
        decode(bad, expected_kind=KIND_STATE)
