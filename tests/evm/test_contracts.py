"""Checkpoints, RewardsDistributor and LocoToken on an in-process EVM (py-evm): the light client
accepts only what more than 2/3 of the current signer set's whole power signed for this very
deployment, claims pay once against any recent root, mints are rate limited, the guardian can
pause, and numbers cannot jump out of reach."""

from __future__ import annotations

import pytest
from web3 import Web3

from abci_app.settlement import evm
from node.evm import client
from tests.kits.evmkit import (
    DEPLOYMENT,
    EVM,
    EVM_CHAIN_ID,
    assert_reverts,
    checkpoint,
    make_set,
    member,
)

SET = make_set(4)  # powers 1, 1, 1, 1


@pytest.fixture
def chain() -> EVM:
    return EVM(SET)


def test_checkpoint_with_more_than_two_thirds_is_accepted(chain: EVM) -> None:
    cp = checkpoint(1, SET, signed_by=SET[:3], root=b"\x22" * 32)
    chain.submit(cp)
    assert chain.cp.functions.lastNumber().call() == 1
    assert chain.cp.functions.rewardsRoot().call() == b"\x22" * 32
    assert chain.cp.functions.lastAppHash().call() == b"\x11" * 32


def test_exactly_two_thirds_of_the_power_is_refused() -> None:
    s = make_set(3, tag="t")  # 2 of 3 is exactly 2/3
    c = EVM(s)
    assert_reverts("NotEnoughPower(uint256,uint256)", c.submit, checkpoint(1, s, signed_by=s[:2]))
    weighted = make_set(3, [2, 2, 2], tag="w")
    c2 = EVM(weighted)
    assert_reverts(
        "NotEnoughPower(uint256,uint256)",
        c2.submit,
        checkpoint(1, weighted, signed_by=weighted[1:]),
    )
    c2.submit(checkpoint(1, weighted))  # all three: 6 of 6


def test_power_weighting_counts_power_not_heads() -> None:
    s = make_set(4, [10, 1, 1, 1], tag="p")
    heavy = [m for m in s if m.power == 10]
    light = [m for m in s if m.power == 1]
    c = EVM(s)
    assert_reverts("NotEnoughPower(uint256,uint256)", c.submit, checkpoint(1, s, signed_by=light))
    c.submit(checkpoint(1, s, signed_by=heavy))  # 10 of 13 > 2/3


def test_forged_signature_is_refused(chain: EVM) -> None:
    cp = checkpoint(1, SET)
    outsider = member("outsider", 1)
    d = evm.checkpoint_digest(
        "loconet-test",
        *DEPLOYMENT,
        1,
        10,
        b"\x11" * 32,
        bytes(32),
        bytes.fromhex(cp["next_set_hash"]),
    )
    cp["signatures"][0]["signature"] = evm.sign_digest(outsider.key, d).hex()
    assert_reverts("BadSignature(uint256)", chain.submit, cp)


def test_duplicate_and_unsorted_signers_are_refused(chain: EVM) -> None:
    head, cur, _, sigs, nxt = client.submit_args(checkpoint(1, SET, signed_by=SET[:3]))
    assert_reverts(
        "SignersNotAscending(uint256)",
        chain.submit,
        {},
        args=(head, cur, [0, 0, 1], [sigs[0], sigs[0], sigs[1]], nxt),
    )
    assert_reverts(
        "SignersNotAscending(uint256)",
        chain.submit,
        {},
        args=(head, cur, [1, 0, 2], [sigs[1], sigs[0], sigs[2]], nxt),
    )
    assert_reverts(
        "SignerOutOfRange(uint256)", chain.submit, {}, args=(head, cur, [0, 1, 9], sigs, nxt)
    )


def test_high_s_twin_of_a_valid_signature_is_refused(chain: EVM) -> None:
    head, cur, idx, sigs, nxt = client.submit_args(checkpoint(1, SET))
    r, s, v = sigs[0][:32], int.from_bytes(sigs[0][32:64], "big"), sigs[0][64]
    twin = r + (evm.SECP256K1_N - s).to_bytes(32, "big") + bytes([55 - v])  # 27 <-> 28
    # the chain refuses it too
    assert evm.recover(chain.cp.functions.digest(head).call(), twin) is None
    assert_reverts(
        "BadSignature(uint256)", chain.submit, {}, args=(head, cur, idx, [twin] + sigs[1:], nxt)
    )
    chain.submit({}, args=(head, cur, idx, sigs, nxt))


def test_checkpoint_of_another_chain_is_refused(chain: EVM) -> None:
    assert_reverts(
        "BadSignature(uint256)", chain.submit, checkpoint(1, SET, chain_id="other-chain")
    )


def test_replayed_and_old_checkpoints_are_refused(chain: EVM) -> None:
    cp1, cp2 = checkpoint(1, SET), checkpoint(2, SET)
    chain.submit(cp2)  # numbers may skip (a set that did not change still signs)
    assert_reverts("StaleNumber(uint64,uint64)", chain.submit, cp2)
    assert_reverts("StaleNumber(uint64,uint64)", chain.submit, cp1)


def test_rotation_then_the_old_set_is_stale() -> None:
    a = make_set(4, tag="a")
    b = make_set(5, [3, 1, 1, 1, 1], tag="b")
    c = EVM(a)
    c.submit(checkpoint(1, a, next_set=b))
    assert c.cp.functions.setHash().call() == evm.set_hash(
        [m.address for m in b], [m.power for m in b]
    )
    assert_reverts("WrongSet(bytes32,bytes32)", c.submit, checkpoint(2, a))  # stale set
    light = [m for m in b if m.power == 1]
    c.submit(checkpoint(2, b, signed_by=[m for m in b if m != light[0]]))  # 6 of 7
    assert c.cp.functions.lastNumber().call() == 2


def test_next_set_must_hash_to_the_committed_value() -> None:
    a, b, evil = make_set(4, tag="a"), make_set(4, tag="b"), make_set(4, tag="e")
    c = EVM(a)
    head, cur, idx, sigs, _ = client.submit_args(checkpoint(1, a, next_set=b))
    evil_set = ([Web3.to_checksum_address(m.address) for m in evil], [1] * 4, 0)
    assert_reverts(
        "WrongNextSet(bytes32,bytes32)", c.submit, {}, args=(head, cur, idx, sigs, evil_set)
    )


def _entries() -> list[tuple[bytes, int]]:
    accts = sorted(member(f"c{i}", 1).address for i in range(5))
    return [(a, 1_000_000 * (i + 1)) for i, a in enumerate(accts)]


def test_claims_pay_once_and_the_difference_later(chain: EVM) -> None:
    entries = _entries()
    root = evm.rewards_root(entries)
    chain.submit(checkpoint(1, SET, root=root))
    acct, cum = entries[2]
    proof = evm.claim_proof(entries, 2)
    assert_reverts("InvalidProof()", chain.claim, acct, cum + 1, proof)  # wrong amount
    # wrong proof
    assert_reverts("InvalidProof()", chain.claim, acct, cum, evm.claim_proof(entries, 1))
    assert_reverts("InvalidProof()", chain.claim, acct, cum, proof, 2)  # not accepted yet
    receipt = chain.claim(acct, cum, proof)
    assert chain.token.functions.balanceOf(Web3.to_checksum_address(acct)).call() == cum
    assert_reverts("NothingToClaim(uint256,uint256)", chain.claim, acct, cum, proof)  # double claim
    assert receipt["gasUsed"] < 150_000  # the token's very first mint also creates totalSupply

    # more withdrawn on loconet: a new root; the old proof pays nothing more, the new one the rest
    entries2 = [(a, c + (500 if a == acct else 0)) for a, c in entries]
    chain.submit(checkpoint(2, SET, root=evm.rewards_root(entries2)))
    assert_reverts("NothingToClaim(uint256,uint256)", chain.claim, acct, cum, proof, 1)
    chain.claim(acct, cum + 500, evm.claim_proof(entries2, 2))
    assert chain.token.functions.balanceOf(Web3.to_checksum_address(acct)).call() == cum + 500
    # a late claimant is still paid in full against the newest root
    late, late_cum = entries2[4]
    late_receipt = chain.claim(late, late_cum, evm.claim_proof(entries2, 4))
    assert late_receipt["gasUsed"] < 100_000, late_receipt["gasUsed"]  # a first claim of an account
    assert chain.token.functions.totalSupply().call() == cum + 500 + late_cum


def test_racing_checkpoint_does_not_revert_a_claim(chain: EVM) -> None:
    """A claim made against checkpoint 1 is mined after checkpoint 2 (posted by anyone, even on
    purpose to front-run it): it still pays, against the root it names."""
    entries = _entries()
    chain.submit(checkpoint(1, SET, root=evm.rewards_root(entries)))
    acct, cum = entries[0]
    proof = evm.claim_proof(entries, 0)
    entries2 = [(a, c + 7) for a, c in entries]
    chain.submit(checkpoint(2, SET, root=evm.rewards_root(entries2)))  # the race
    chain.claim(acct, cum, proof, 1)
    assert chain.token.functions.balanceOf(Web3.to_checksum_address(acct)).call() == cum
    chain.claim(acct, cum + 7, evm.claim_proof(entries2, 0), 2)  # and the rest later
    # roots older than ROOT_HISTORY checkpoints are gone (the slot holds a newer root)
    history = chain.cp.functions.ROOT_HISTORY().call()
    for n in range(3, history + 2):
        chain.submit(checkpoint(n, SET, root=evm.rewards_root(entries2)))
    late, late_cum = entries[1]
    assert_reverts("InvalidProof()", chain.claim, late, late_cum, evm.claim_proof(entries, 1), 1)


def test_checkpoint_for_another_deployment_is_refused() -> None:
    """Two deployments on one EVM chain with the same loconet chain id and signer set: a
    checkpoint signed for one is refused by the other (the digest names address(this))."""
    first = EVM(SET)
    second_addr = evm.create_address(bytes.fromhex(first.sender.address[2:]), 1)
    second = client.deploy(first.w3, first.sender, "loconet-test", *_set_args(SET), 0)
    assert bytes.fromhex(second.distributor[2:]) == second_addr
    cp = checkpoint(1, SET)  # for the first deployment
    first.submit(cp)
    other = client.checkpoints(first.w3, second)
    fn = other.functions.submit(*client.submit_args(cp))
    assert_reverts("BadSignature(uint256)", client.send, first.w3, fn, first.sender)
    # signed for the second: accepted there, refused by the first
    cp2 = checkpoint(2, SET, deployment=(EVM_CHAIN_ID, second_addr))
    client.send(first.w3, other.functions.submit(*client.submit_args(cp2)), first.sender)
    assert_reverts("BadSignature(uint256)", first.submit, cp2)


def test_checkpoint_for_another_evm_chain_is_refused(chain: EVM) -> None:
    cp = checkpoint(1, SET, deployment=(1, DEPLOYMENT[1]))  # same address, Ethereum mainnet
    assert_reverts("BadSignature(uint256)", chain.submit, cp)


def _set_args(ms: list) -> tuple[list[str], list[int]]:
    return [Web3.to_checksum_address(m.address) for m in ms], [m.power for m in ms]


def test_keyless_power_counts_as_not_signing() -> None:
    """Validators without a settlement key hold 1 of 4 power: the 3 keyed ones together sign 3/4
    (> 2/3), two of them 2/4 is refused, though it is 2/3 of the keyed power."""
    s = make_set(3, tag="k")
    c = EVM(s, keyless=1)
    assert_reverts(
        "NotEnoughPower(uint256,uint256)", c.submit, checkpoint(1, s, signed_by=s[:2], keyless=1)
    )
    assert_reverts("WrongSet(bytes32,bytes32)", c.submit, checkpoint(1, s))  # keyless left out
    c.submit(checkpoint(1, s, keyless=1))
    heavy = make_set(3, tag="k")  # keyless 2 of 5: all three keyed sign 3/5 < 2/3
    c2 = EVM(heavy, keyless=2)
    assert_reverts("NotEnoughPower(uint256,uint256)", c2.submit, checkpoint(1, heavy, keyless=2))


def test_checkpoint_number_cannot_jump_out_of_reach(chain: EVM) -> None:
    """A forged checkpoint numbered 2^64-1 would block every later one: numbers may skip, by at
    most MAX_NUMBER_GAP."""
    gap = chain.cp.functions.MAX_NUMBER_GAP().call()
    assert_reverts(
        "NumberGapTooLarge(uint64,uint64)", chain.submit, checkpoint(2**64 - 1, SET, height=5)
    )
    assert_reverts("NumberGapTooLarge(uint64,uint64)", chain.submit, checkpoint(gap + 1, SET))
    chain.submit(checkpoint(gap, SET))
    chain.submit(checkpoint(gap + 1, SET))


def test_forged_mint_is_rate_limited() -> None:
    """A checkpoint signed by >2/3 of the keys that credits an attacker 10^30 mints at most
    mint_limit per window; the rest waits for later windows (time for the guardian to pause)."""
    c = EVM(SET, mint_limit=1_000, mint_window=3600)
    thief = member("thief", 1).address
    entries = [(thief, 10**30)]
    c.submit(checkpoint(1, SET, root=evm.rewards_root(entries)))
    c.claim(thief, 10**30, [])
    assert c.token.functions.balanceOf(Web3.to_checksum_address(thief)).call() == 1_000
    assert c.dist.functions.claimed(Web3.to_checksum_address(thief)).call() == 1_000
    assert_reverts("RateLimited(uint256)", c.claim, thief, 10**30, [])
    assert c.dist.functions.mintAllowance().call() == 0
    tester = c.w3.provider.ethereum_tester  # type: ignore[attr-defined]
    tester.time_travel(c.w3.eth.get_block("latest")["timestamp"] + 3601)
    c.claim(thief, 10**30, [])
    assert c.token.functions.totalSupply().call() == 2_000


def test_guardian_pause_stops_checkpoints_and_claims() -> None:
    from eth_account import Account

    c = EVM(SET)
    entries = _entries()
    c.submit(checkpoint(1, SET, root=evm.rewards_root(entries)))
    stranger = Account.from_key(b"\x07" * 32)
    c.w3.eth.send_transaction(
        {"from": c.w3.eth.accounts[0], "to": stranger.address, "value": Web3.to_wei(1, "ether")}
    )
    assert_reverts("NotGuardian(address)", client.send, c.w3, c.cp.functions.pause(), stranger)
    assert c.cp.functions.guardian().call() == c.sender.address
    client.send(c.w3, c.cp.functions.pause(), c.sender)
    assert_reverts("IsPaused()", c.submit, checkpoint(2, SET))
    assert_reverts("IsPaused()", c.claim, *entries[0], evm.claim_proof(entries, 0))
    client.send(c.w3, c.cp.functions.unpause(), c.sender)
    c.claim(*entries[0], evm.claim_proof(entries, 0))
    # handing the role on: the old guardian loses it
    client.send(c.w3, c.cp.functions.setGuardian(stranger.address), c.sender)
    assert_reverts("NotGuardian(address)", client.send, c.w3, c.cp.functions.pause(), c.sender)


def test_only_the_distributor_mints(chain: EVM) -> None:
    fn = chain.token.functions.mint(chain.sender.address, 1)
    assert_reverts("NotMinter(address)", client.send, chain.w3, fn, chain.sender)
    assert chain.token.functions.decimals().call() == 6


@pytest.mark.parametrize("n", [1, 2, 3, 5, 8])
def test_python_tree_matches_openzeppelin_merkle_proof(chain: EVM, n: int) -> None:
    entries = _entries()[:n]
    root = evm.rewards_root(entries)
    for i, (a, c) in enumerate(entries):
        leaf = chain.dist.functions.leaf(Web3.to_checksum_address(a), c).call()
        assert leaf == evm.claim_leaf(a, c)
        assert evm.verify_proof(root, leaf, evm.claim_proof(entries, i))
