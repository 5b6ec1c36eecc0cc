"""ProcessProposal is a function of the block and the state, not of what this node's signature
cache holds (attacker-review regression). A tx signed for ANOTHER chain id, pipelined to a
node's mempool connection in a batch (Application.preverify), was remembered by SignatureCache;
_stateless_ok returned True on a cache hit before checking the chain id, so that node ACCEPTed a
proposal holding it while a node that never saw it REJECTed the same proposal: a Byzantine
proposer could pick which validators vote for its block, and get a fee-less tx into it. Now the
chain id is checked on every path and preverify does not cache foreign-chain txs."""

from abci_app.pb import abci
from tests.chain.test_abci_socket import server  # noqa: F401 (fixture)
from tests.kits.chainkit import new_chain, send_msg


def _proposal(c, txs):
    return abci.RequestProcessProposal(txs=txs, height=c.store.height + 1)


def test_process_proposal_is_a_function_of_the_block_only() -> None:
    a, b = new_chain(), new_chain()  # two honest validators of the same chain, same state
    assert a.store.app_hash == b.store.app_hash
    k = a.keys[0]
    # txs for another chain: CheckTx refuses them (ErrWrongChainId), but a pipelined batch of
    # them goes through preverify first
    foreign = [
        a.tx(k, [send_msg(a.keys[1].address, 1 + i)], chain_id="other-chain") for i in range(4)
    ]
    assert all(a.check(t).code == 5 for t in foreign[:1])
    a.app.preverify(foreign)  # what server._serve_conn does for a read holding >1 CheckTx
    ra = a.app.process_proposal(_proposal(a, [foreign[0]]))
    rb = b.app.process_proposal(_proposal(b, [foreign[0]]))
    assert ra.status == rb.status == abci.ResponseProcessProposal.REJECT


def test_a_cached_signature_does_not_skip_the_chain_id_check() -> None:
    """Whatever puts a foreign-chain tx's signature in the cache (its signature is valid), a
    proposal holding it is rejected."""
    from abci_app.codec.tx import decode_tx

    a = new_chain()
    k = a.keys[0]
    t = a.tx(k, [send_msg(a.keys[1].address, 7)], chain_id="other-chain")
    a.app.sigs.verify(decode_tx(t))
    assert a.app.sigs.lookup(t) is not None
    r = a.app.process_proposal(_proposal(a, [t]))
    assert r.status == abci.ResponseProcessProposal.REJECT


def test_preverify_does_not_cache_foreign_chain_txs() -> None:
    a = new_chain()
    k = a.keys[0]
    foreign = [a.tx(k, [send_msg(a.keys[1].address, 1 + i)], chain_id="x") for i in range(8)]
    ours = [a.tx(k, [send_msg(a.keys[1].address, 1 + i)]) for i in range(8)]
    a.app.preverify(foreign + ours)
    assert all(a.app.sigs.lookup(t) is None for t in foreign)
    assert all(a.app.sigs.lookup(t) is not None for t in ours)


def test_through_the_socket_a_mempool_batch_primes_the_cache(server) -> None:  # noqa: F811
    """The same over the real ABCI server: four CheckTx in one write on the mempool connection
    (what CometBFT's pipelined CheckTxAsync sends under load), all refused with ErrWrongChainId
    (code 5), yet afterwards ProcessProposal ACCEPTs a block holding one of them, where a node
    that did not see the batch REJECTs it."""
    from abci_app.codec.tx import build_tx
    from abci_app.server import frame
    from tests.chain.test_abci_socket import Client, _started_chain
    from tests.kits.chainkit import signer

    consensus = _started_chain(server)
    k = signer(0)
    foreign = [
        build_tx(
            k,
            chain_id="other-chain",
            msgs=[send_msg(signer(1).address, 1 + i)],
            sequence=0,
            fee=10**6,
        )
        for i in range(4)
    ]
    mempool = Client(server.bound_port())
    mempool.sock.sendall(
        b"".join(frame(abci.Request(check_tx=abci.RequestCheckTx(tx=t))) for t in foreign)
        + frame(abci.Request(flush=abci.RequestFlush()))
    )
    codes = [mempool.recv().check_tx.code for _ in foreign]
    assert mempool.recv().WhichOneof("value") == "flush"
    r = consensus.call(process_proposal=abci.RequestProcessProposal(txs=[foreign[0]], height=2))
    assert codes == [5, 5, 5, 5]
    assert r.process_proposal.status == abci.ResponseProcessProposal.REJECT, (
        "a tx for another chain is ACCEPTed in a proposal because this node cached its signature"
    )
