"""Property: two fresh apps fed the same random blocks (valid and invalid txs mixed) reach the
same app hash and the same tx results at every height; the supply invariant holds after every
block (Chain.block checks all invariants), and a node restarted from disk continues identically."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abci_app.bank import keeper
from abci_app.pb import tx_pb2
from tests.kits.chainkit import Chain, new_chain, send_msg

N_KEYS = 4

tx_spec = st.tuples(
    st.integers(0, N_KEYS - 1),  # sender
    st.integers(0, N_KEYS),  # recipient (N_KEYS = a fresh address)
    st.sampled_from([0, 1, 7, 10**6, 10**11, 10**12, 2**64 - 1]),  # amount (some invalid)
    st.sampled_from([None, None, 0, 1, 10**4]),  # fee (None: the minimum; 0 and 1: below it)
    st.sampled_from(["ok", "ok", "ok", "replay", "gap", "badsig", "chain"]),
)
blocks = st.lists(st.lists(tx_spec, max_size=6), min_size=1, max_size=8)


def build(c: Chain, spec: tuple[int, int, int, int | None, str]) -> bytes:
    s, r, amount, fee, mode = spec
    k = c.keys[s]
    to = c.keys[r].address if r < N_KEYS else b"\x42" * 20
    seq = c.seqs.get(k.address, 0)
    if mode == "replay":
        seq = max(seq - 1, 0)
    elif mode == "gap":
        seq += 2
    raw = c.tx(
        k,
        [send_msg(to, amount)],
        fee=fee,
        seq=seq,
        chain_id="wrong" if mode == "chain" else "loconet-test",
    )
    if mode == "badsig":
        env = tx_pb2.TxRaw.FromString(raw)
        env.signature = bytes(64)
        raw = env.SerializeToString(deterministic=True)
    return raw


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks)
def test_two_apps_same_hash_every_height(
    block_specs: list[list[tuple[int, int, int, int, str]]],
) -> None:
    a, b = new_chain(n_keys=N_KEYS), new_chain(n_keys=N_KEYS)
    assert a.store.app_hash == b.store.app_hash
    supply = keeper.get_supply(a.store)
    for specs in block_specs:
        txs = [build(a, s) for s in specs]
        # b gets the very same bytes, and tracks sequences the same way
        ra, rb = a.block(txs), b.block(txs)
        assert ra.app_hash == rb.app_hash
        assert [(r.code, r.log) for r in ra.tx_results] == [(r.code, r.log) for r in rb.tx_results]
        assert a.store.app_hash == ra.app_hash
        assert keeper.get_supply(a.store) == supply  # transfers and fees never mint or burn
        for r, s in zip(ra.tx_results, specs, strict=True):
            if s[4] in ("badsig", "chain", "gap") or s[2] == 0:
                assert r.code != 0


def test_restart_from_disk_continues_identically(tmp_path) -> None:
    """A node that stops after any Commit and reopens its store produces the same hashes as
    one that never stopped (the store is the only state that survives)."""
    from abci_app.app import Application
    from abci_app.pb import abci
    from abci_app.store import MerkleStore

    ref = new_chain()
    disk = new_chain()
    path = tmp_path / "app.db"
    # move `disk` onto a file-backed store by replaying its genesis block there
    store = MerkleStore(path)
    app = Application(store, check_invariants=True)
    from tests.kits.chainkit import genesis_request

    app.init_chain(
        genesis_request({k.address: 10**12 for k in disk.keys}, [(disk.validators[0], 10)])
    )
    disk.app = app
    disk.block([])
    assert disk.store.app_hash == ref.store.app_hash
    for i in range(5):
        txs = [ref.tx(ref.keys[0], [send_msg(ref.keys[1].address, 10 + i)])]
        r1 = ref.block(txs)
        r2 = disk.block(txs)
        assert r1.app_hash == r2.app_hash
        # restart: close and reopen the store, new Application
        disk.store.close()
        disk.app = Application(MerkleStore(path), check_invariants=True)
        info = disk.app.info(abci.RequestInfo())
        assert (info.last_block_height, info.last_block_app_hash) == (
            ref.store.height,
            ref.store.app_hash,
        )
    disk.store.close()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(blocks)
def test_check_tx_before_the_block_changes_no_block_result(
    block_specs: list[list[tuple[int, int, int, int, str]]],
) -> None:
    """A node that ran CheckTx on the block's txs first (its signature cache and the reads of the
    committed store it shares with FinalizeBlock are warm, invalid txs included) finalizes every
    block exactly as a node that never saw them: same results, events and app hash."""
    warm, cold = new_chain(n_keys=N_KEYS), new_chain(n_keys=N_KEYS)
    for specs in block_specs:
        txs = [build(warm, s) for s in specs]
        for t in txs:
            warm.check(t)
        rw, rc = warm.block(txs), cold.block(txs)
        assert rw.SerializeToString(deterministic=True) == rc.SerializeToString(deterministic=True)
        for r, s in zip(rw.tx_results, specs, strict=True):
            if s[4] in ("badsig", "chain", "gap"):
                assert r.code != 0  # rejected in the block although CheckTx saw it first
