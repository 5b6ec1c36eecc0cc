"""The per-node signature cache: a tx is decoded and verified once; the parallel pre-verification
of pipelined CheckTx batches remembers exactly the valid ones and changes no result."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from abci_app.codec.tx import SignatureCache, decode_tx
from abci_app.errors import ErrInvalidSignature
from abci_app.pb import tx_pb2
from tests.kits.chainkit import Chain, send_msg


def _bad_sig(raw: bytes) -> bytes:
    env = tx_pb2.TxRaw.FromString(raw)
    env.signature = bytes(64)
    return env.SerializeToString(deterministic=True)


def test_preverify_remembers_only_valid(chain: Chain) -> None:
    k = chain.keys[0]
    good = [chain.tx(k, [send_msg(chain.keys[1].address, i + 1)], seq=i) for i in range(6)]
    bad = [_bad_sig(t) for t in good[:3]]
    cache = SignatureCache()
    with ThreadPoolExecutor(2) as pool:
        cache.preverify(good + bad + [b"junk"], pool, 2)
    assert all(cache.lookup(t) is not None for t in good)
    assert all(cache.lookup(t) is None for t in bad)
    with pytest.raises(ErrInvalidSignature):
        cache.verify(decode_tx(bad[0]))


def test_check_tx_results_same_with_and_without_preverify(chain: Chain) -> None:
    k = chain.keys[0]
    txs = [chain.tx(k, [send_msg(chain.keys[1].address, 1)], seq=i) for i in range(8)]
    txs[3] = _bad_sig(txs[3])
    chain.app.preverify(txs)
    codes = [chain.check(t).code for t in txs]
    assert codes[:3] == [0, 0, 0]
    assert codes[3] == ErrInvalidSignature.code
    assert all(c != 0 for c in codes[4:])  # sequence gap after the rejected tx


def test_invalid_flood_of_signed_txs_stays_within_the_byte_bound(chain: Chain) -> None:
    """A tx's signature verifies before its fee and funds are checked, so anyone can fill the
    cache for free (CheckTx, /simulate) with large signed txs that then fail: bounded by count
    only (200,000), 64 KiB txs pinned ~25 GB. It is bounded by bytes too, oldest out."""
    k = chain.keys[0]
    txs = [
        chain.tx(k, [send_msg(chain.keys[1].address, 1)], seq=i, memo="m" * 200) for i in range(40)
    ]
    per = SignatureCache._cost(txs[0])
    cache = SignatureCache(capacity_bytes=10 * per)
    for raw in txs:
        cache.verify(decode_tx(raw))
        assert cache.cached_bytes <= 10 * per + 8  # memo-free size differences: a few bytes
    assert 9 <= len(cache) <= 10
    assert cache.lookup(txs[-1]) is not None and cache.lookup(txs[0]) is None
    assert SignatureCache()._capacity_bytes == 256 << 20  # the node's own: 256 MiB
