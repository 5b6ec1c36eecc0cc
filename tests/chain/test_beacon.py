"""The randomness beacon (abci_app/beacon.py, vote_extensions.block_beacon) on the 4-app lockstep
network of settlekit: every node derives the same beacon, a proposer cannot forge, borrow or
re-grind a share, and reordering or changing the block's contents does not move the seed."""

from __future__ import annotations

import itertools

from abci_app import beacon
from abci_app.context import BlockContext
from abci_app.pb import abci
from abci_app.vote_extensions import (
    INJECTED_PREFIX,
    VoteExtension,
    beacon_share,
    block_beacon,
    extension_sign_bytes,
    split_block,
)
from tests.kits.chainkit import CHAIN_ID, send_msg
from tests.kits.settlekit import Net, new_net


def _injected(txs: list[bytes]) -> abci.ExtendedCommitInfo:
    assert txs and txs[0].startswith(INJECTED_PREFIX)
    return abci.ExtendedCommitInfo.FromString(txs[0][len(INJECTED_PREFIX) :])


def _with(txs: list[bytes], info: abci.ExtendedCommitInfo) -> list[bytes]:
    return [INJECTED_PREFIX + info.SerializeToString(deterministic=True), *txs[1:]]


def _expected(net: Net, h: int, members: list[bytes]) -> bytes:
    """The beacon from the keys alone: each member's VRF output for (chain, h)."""
    outs = []
    for a in members:
        i = net.by_address(a)
        outs.append((a, beacon.output(beacon.prove(net.vals[i].seed, beacon.alpha(CHAIN_ID, h)))))
    return beacon.block_beacon(outs)


def _resign(net: Net, info: abci.ExtendedCommitInfo, k: int, ext: VoteExtension, h: int) -> None:
    """What a validator can do to its own vote: any extension, signed with its own key."""
    v = info.votes[k]
    raw = ext.SerializeToString(deterministic=True)
    v.vote_extension = raw
    v.extension_signature = net.vals[net.by_address(v.validator.address)].sign(
        extension_sign_bytes(raw, h, 0, CHAIN_ID)
    )


def test_beacon_identical_on_every_node_and_fixed_by_the_keys() -> None:
    net = new_net(with_keys=False)
    for _ in range(4):
        resp = net.block([])
        h = net.height
        votes, n = split_block(net.last_txs)
        # every block after the first carries the last commit's shares
        assert n == 1 and len(votes) == 4
        for app in net.apps:  # each node verifies each share on its own state
            for a, ext in votes:
                assert beacon_share(app.store, CHAIN_ID, a, h - 1, ext) == beacon.output(ext.beacon)
        b = block_beacon(votes)
        assert len(b) == 32 and b == _expected(net, h - 1, sorted(net.comet_set(h)))
        assert resp.app_hash == net.app_hashes[h]  # the 4 apps agreed (Net.block asserts it)


def test_seed_is_the_beacon_and_falls_back_to_the_block_hash() -> None:
    with_beacon = BlockContext(5, 0, b"", b"H" * 32, CHAIN_ID, beacon=b"B" * 32)
    assert with_beacon.seed == b"B" * 32
    # kits and chains without vote extensions
    without = BlockContext(5, 0, b"", b"H" * 32, CHAIN_ID)
    assert without.seed == b"H" * 32
    assert block_beacon(()) == b""


def test_forged_foreign_or_stale_share_is_refused_in_process_proposal() -> None:
    net = new_net(with_keys=False)
    net.blocks(2)
    h = net.height + 1
    good = net.prepare([])
    assert all(net.process(good, i) for i in range(4))
    info = _injected(good)
    k = 0
    a = info.votes[k].validator.address
    me = VoteExtension.FromString(info.votes[k].vote_extension)
    other = VoteExtension.FromString(info.votes[1].vote_extension)
    cases = {
        "forged": bytes(me.beacon[:50]) + bytes([me.beacon[50] ^ 1]) + bytes(me.beacon[51:]),
        "foreign": other.beacon,  # another validator's share presented as a's
        "stale": beacon.prove(net.vals[net.by_address(a)].seed, beacon.alpha(CHAIN_ID, h - 2)),
        "other chain": beacon.prove(
            net.vals[net.by_address(a)].seed, beacon.alpha("another-chain", h - 1)
        ),
        "missing": b"",
    }
    for name, share in cases.items():
        bad = abci.ExtendedCommitInfo()
        bad.CopyFrom(info)
        ext = VoteExtension()
        ext.CopyFrom(me)
        ext.beacon = share
        _resign(net, bad, k, ext, h - 1)  # the extension signature itself is valid
        txs = _with(good, bad)
        assert not any(net.process(txs, i) for i in range(4)), name
    # dropping the injected votes, or keeping 2 of 4, is refused too
    assert not any(net.process(good[1:], i) for i in range(4))
    two = abci.ExtendedCommitInfo(round=info.round, votes=list(info.votes)[:2])
    assert not any(net.process(_with(good, two), i) for i in range(4))


def test_grinder_cannot_change_the_seed() -> None:
    net = new_net(with_keys=False, n_keys=2)
    net.blocks(2)
    h = net.height + 1
    t1 = net.tx(net.keys[0], [send_msg(net.keys[1].address, 1)])
    t2 = net.tx(net.keys[1], [send_msg(net.keys[0].address, 2)])
    base = net.prepare([t1, t2])
    want = block_beacon(split_block(base)[0])
    # reordered, changed or emptied contents (and so another block hash): same beacon
    for txs in ([base[0], t2, t1], [base[0], t1], [base[0]]):
        assert all(net.process(txs, i) for i in range(4))
        assert block_beacon(split_block(txs)[0]) == want
    # the proposer re-proves its own share with other nonces: valid, the same output, the same
    # beacon
    info = _injected(base)
    k = next(
        j
        for j, v in enumerate(info.votes)
        if v.validator.address == net.vals[net.proposer(h)].address
    )
    seed = net.vals[net.proposer(h)].seed
    mine = VoteExtension.FromString(info.votes[k].vote_extension)
    for nonce in (1, 2, 3):
        alt = abci.ExtendedCommitInfo()
        alt.CopyFrom(info)
        ext = VoteExtension()
        ext.CopyFrom(mine)
        ext.beacon = beacon.prove(seed, beacon.alpha(CHAIN_ID, h - 1), nonce=nonce)
        assert ext.beacon != mine.beacon
        _resign(net, alt, k, ext, h - 1)
        txs = _with(base, alt)
        assert all(net.process(txs, i) for i in range(4))
        assert block_beacon(split_block(txs)[0]) == want
    # what is left: which >2/3 subset of the commit to include. 4 equal validators: 4 + 1 = 5
    # beacons
    outcomes = set()
    for r in (3, 4):
        for sub in itertools.combinations(list(info.votes), r):
            txs = _with(base, abci.ExtendedCommitInfo(round=info.round, votes=list(sub)))
            assert all(net.process(txs, i) for i in range(4))
            outcomes.add(block_beacon(split_block(txs)[0]))
    assert len(outcomes) == 5 and want in outcomes
