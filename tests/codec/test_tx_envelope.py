"""The tx envelope: every rejection listed in the foundation issue, in CheckTx and again in
FinalizeBlock, with a stable code; a rejected tx changes nothing in state."""

from __future__ import annotations

import pytest

from abci_app.codec.tx import MAX_TX_BYTES, decode_tx
from abci_app.errors import (
    ErrEmptyTx,
    ErrInvalidPubKey,
    ErrInvalidSignature,
    ErrMemoTooLong,
    ErrTxDecode,
    ErrTxTimeout,
    ErrTxTooLarge,
    ErrUnknownMessage,
    ErrWrongChainId,
    ErrWrongSequence,
)
from abci_app.pb import tx_pb2
from tests.kits.chainkit import Chain, assert_rejected, send_msg


def valid_tx(chain: Chain, **kw) -> bytes:
    k0, k1 = chain.keys[0], chain.keys[1]
    return chain.tx(k0, [send_msg(k1.address, 1000)], **kw)


def test_valid_tx_accepted_and_applied(chain: Chain) -> None:
    raw = valid_tx(chain)
    assert chain.check(raw).code == 0
    resp = chain.block([raw])
    assert resp.tx_results[0].code == 0
    assert any(e.type == "transfer" for e in resp.tx_results[0].events)


def test_invalid_bad_signature(chain: Chain) -> None:
    raw = valid_tx(chain)
    env = tx_pb2.TxRaw.FromString(raw)
    sig = bytearray(env.signature)
    sig[0] ^= 1
    env.signature = bytes(sig)
    assert_rejected(chain, env.SerializeToString(deterministic=True), ErrInvalidSignature)


def test_invalid_signature_by_other_key(chain: Chain) -> None:
    """A signature made by another key over the same bytes does not verify."""
    raw = valid_tx(chain)
    other = chain.tx(chain.keys[2], [send_msg(chain.keys[1].address, 1000)])
    env = tx_pb2.TxRaw.FromString(raw)
    env.signature = tx_pb2.TxRaw.FromString(other).signature
    assert_rejected(chain, env.SerializeToString(deterministic=True), ErrInvalidSignature)


def test_invalid_wrong_chain_id(chain: Chain) -> None:
    assert_rejected(chain, valid_tx(chain, chain_id="other-chain"), ErrWrongChainId)


def test_invalid_replay(chain: Chain) -> None:
    raw = valid_tx(chain)
    assert chain.block([raw]).tx_results[0].code == 0
    assert_rejected(chain, raw, ErrWrongSequence)


def test_invalid_sequence_gap(chain: Chain) -> None:
    assert_rejected(chain, valid_tx(chain, seq=5), ErrWrongSequence)


def test_invalid_unknown_message_type(chain: Chain) -> None:
    k0 = chain.keys[0]
    msg = tx_pb2.Msg()
    msg.ParseFromString(b"\xfa\x3e\x02\x08\x01")  # field 999: a type this node does not know
    raw = chain.tx(k0, [msg])
    assert_rejected(chain, raw, ErrUnknownMessage)


def test_invalid_oversize(chain: Chain) -> None:
    k0, k1 = chain.keys[0], chain.keys[1]
    raw = chain.tx(k0, [send_msg(k1.address, 1)] * 20, memo="x" * 200)
    big = raw + b"\x00" * (MAX_TX_BYTES + 1 - len(raw))
    assert_rejected(chain, big, ErrTxTooLarge)


@pytest.mark.parametrize("suffix", [b"\x00", b"\x08\x01", b"\x1a\x00", b"garbage"])
def test_invalid_trailing_garbage(chain: Chain, suffix: bytes) -> None:
    assert_rejected(chain, valid_tx(chain) + suffix, ErrTxDecode)


def test_invalid_non_canonical_body(chain: Chain) -> None:
    """Re-ordered or duplicated fields inside the signed body are refused even if signed."""
    from abci_app.codec.tx import sign_bytes

    k0, k1 = chain.keys[0], chain.keys[1]
    body = tx_pb2.TxBody(messages=[send_msg(k1.address, 5)]).SerializeToString(deterministic=True)
    body = body + b"\x12\x00"  # memo field set explicitly to the empty string: not canonical
    auth = tx_pb2.AuthInfo(
        public_key=k0.public_bytes(), sequence=0, fee=1, chain_id="loconet-test"
    ).SerializeToString()
    sig = k0.sign(sign_bytes("loconet-test", body, auth))
    raw = tx_pb2.TxRaw(body_bytes=body, auth_info_bytes=auth, signature=sig).SerializeToString()
    assert_rejected(chain, raw, ErrTxDecode)


def test_invalid_empty_tx(chain: Chain) -> None:
    assert_rejected(chain, chain.tx(chain.keys[0], [], fee=1), ErrEmptyTx)


def test_invalid_memo_too_long(chain: Chain) -> None:
    raw = chain.tx(chain.keys[0], [send_msg(chain.keys[1].address, 1)], memo="m" * 257)
    assert_rejected(chain, raw, ErrMemoTooLong)


def test_invalid_timeout_height(chain: Chain) -> None:
    raw = chain.tx(chain.keys[0], [send_msg(chain.keys[1].address, 1)], timeout_height=1)
    assert_rejected(chain, raw, ErrTxTimeout)


def test_invalid_pubkey_length(chain: Chain) -> None:
    raw = valid_tx(chain)
    env = tx_pb2.TxRaw.FromString(raw)
    auth = tx_pb2.AuthInfo.FromString(env.auth_info_bytes)
    auth.public_key = auth.public_key[:31]
    env.auth_info_bytes = auth.SerializeToString(deterministic=True)
    assert_rejected(chain, env.SerializeToString(deterministic=True), ErrInvalidPubKey)


@pytest.mark.parametrize("raw", [b"", b"\xff", b"\x0a\x05abc", bytes(range(40))])
def test_invalid_garbage_never_crashes(chain: Chain, raw: bytes) -> None:
    r = chain.check(raw)
    assert r.code != 0 and r.codespace == "tx"
    with pytest.raises(Exception) as e:
        decode_tx(raw)
    assert hasattr(e.value, "code")


def test_checktx_state_is_separate_and_reset_after_commit(chain: Chain) -> None:
    """Two txs of one account pass CheckTx in sequence (check state advances), then after a
    Commit of a block without them the check state is reset to committed state."""
    k0, k1 = chain.keys[0], chain.keys[1]
    a = chain.tx(k0, [send_msg(k1.address, 1)], seq=0)
    b = chain.tx(k0, [send_msg(k1.address, 1)], seq=1)
    assert chain.check(a).code == 0
    assert chain.check(b).code == 0
    assert chain.check(b).code == ErrWrongSequence.code  # check state remembers b
    chain.block([])  # commit without them: check state reset
    assert chain.check(b).code == ErrWrongSequence.code  # seq 1 before 0 again
    assert chain.check(a).code == 0


def test_invalid_unknown_field_in_a_nested_message(chain: Chain) -> None:
    """Only the top level of each message was checked: a JobSpec (or any nested message) with a
    field this node does not know was accepted and stored in the Job record as it came."""
    from abci_app.pb import jobs_pb2

    k0 = chain.keys[0]
    spec = jobs_pb2.JobSpec()
    # field 127
    spec.MergeFromString(jobs_pb2.JobSpec(inner_steps=4).SerializeToString() + b"\xf8\x07\x01")
    job = tx_pb2.Msg(create_job=jobs_pb2.MsgCreateJob(spec=spec, rounds=1, reward_per_round=1))
    res = assert_rejected(chain, chain.tx(k0, [job], fee=10), ErrTxDecode)
    assert "create_job.spec" in res.log
    wrapper = tx_pb2.Msg()  # a known message plus an unknown field in the Msg wrapper itself
    wrapper.MergeFromString(
        send_msg(chain.keys[1].address, 5).SerializeToString() + b"\xf8\x07\x01"
    )
    assert_rejected(chain, chain.tx(k0, [wrapper], fee=10), ErrTxDecode)
