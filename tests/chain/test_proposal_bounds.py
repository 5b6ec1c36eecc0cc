"""PrepareProposal keeps the block's tx data within ``max_tx_bytes`` as CometBFT measures it.

Regression: under load CometBFT reaps txs whose protobuf size (``ComputeProtoSizeForTxs``: each
tx's tag and length prefix included) fills ``max_tx_bytes``; the app added the injected vote
extensions and counted only raw tx bytes, so its proposal was up to ~3 bytes per tx + the
injected tx over the bound. CometBFT answers that with "CONSENSUS FAILURE!!! transaction data
size exceeds maximum" and the proposer's consensus stops: two of four validators stopped and the
4-validator testnet made no block again (benchmarks/RESULTS.md, "the chain stops under load")."""

from __future__ import annotations

import importlib

from abci_app.app import data_size
from abci_app.pb import abci
from tests.kits.chainkit import new_chain, send_msg
from tests.kits.settlekit import Net, new_net

# CometBFT's block Data message (the stubs' folder is on sys.path once abci_app.pb is imported)
types_pb2 = importlib.import_module("tendermint.types.types_pb2")


def _proto_size(txs: list[bytes]) -> int:
    """CometBFT's ComputeProtoSizeForTxs: the size of ``Data{txs}``."""
    return types_pb2.Data(txs=txs).ByteSize()


def _transfers(net: Net, n: int) -> list[bytes]:
    out = []
    for i in range(n):
        k = net.keys[i % len(net.keys)]
        out.append(net.tx(k, [send_msg(net.keys[(i + 1) % len(net.keys)].address, 1)]))
        net.seqs[k.address] = net.seqs.get(k.address, 0) + 1
    return out


def test_data_size_is_cometbfts_measure() -> None:
    for n in (0, 1, 127, 128, 151, 16383, 16384, 70000):
        raw = b"x" * n
        assert data_size(raw) == _proto_size([raw])
    txs = [b"a" * 151, b"b" * 200, b"c"]
    assert sum(map(data_size, txs)) == _proto_size(txs)


def test_full_reap_plus_injected_tx_stays_within_max_tx_bytes() -> None:
    net = new_net(n_keys=4)
    net.blocks(2)  # from here every proposal injects the last commit's vote extensions
    txs = _transfers(net, 60)
    bound = _proto_size(txs)  # what CometBFT's reaper hands over: exactly at the bound
    req = abci.RequestPrepareProposal(
        txs=txs, height=net.height + 1, max_tx_bytes=bound, local_last_commit=net.commit
    )
    out = list(net.apps[net.proposer(net.height + 1)].prepare_proposal(req).txs)
    assert out[0] != txs[0]  # the injected tx leads
    assert _proto_size(out) <= bound
    # the reaped txs kept are a prefix (mempool order), and only as many are dropped as needed
    kept = out[1:]
    assert kept == txs[: len(kept)]
    assert _proto_size([*out, txs[len(kept)]]) > bound
    assert all(net.process(out, i) for i in range(4))


def test_raw_bytes_at_the_bound_are_cut_by_their_framing() -> None:
    """Without vote extensions: txs whose raw bytes sum to exactly the bound do not all fit."""
    c = new_chain()
    txs = []
    for i in range(20):
        k = c.keys[i % len(c.keys)]
        txs.append(c.tx(k, [send_msg(c.keys[0].address, 1)], seq=i // len(c.keys)))
    raw_total = sum(len(t) for t in txs)
    req = abci.RequestPrepareProposal(txs=txs, height=c.store.height + 1, max_tx_bytes=raw_total)
    out = list(c.app.prepare_proposal(req).txs)
    assert _proto_size(out) <= raw_total < _proto_size(txs)
    assert out == txs[: len(out)] and len(out) < len(txs)
