"""Checkpoints, RewardsDistributor and LocoToken on an in-process EVM (py-evm): the light client
accepts only what more than 2/3 of the current signer set signed, and claims pay once."""

from __future__ import annotations

import pytest
from web3 import Web3

from abci_app.settlement import evm
from node.evm import client
from tests.kits.evmkit import EVM, assert_reverts, checkpoint, make_set, member

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
        "loconet-test", 1, 10, b"\x11" * 32, bytes(32), bytes.fromhex(cp["next_set_hash"])
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
    evil_set = ([Web3.to_checksum_address(m.address) for m in evil], [1] * 4)
    assert_reverts(
        "WrongNextSet(bytes32,bytes32)", c.submit, {}, args=(head, cur, idx, sigs, evil_set)
    )


def _entries() -> list[tuple[bytes, int]]:
    accts = sorted(member(f"c{i}", 1).address for i in range(5))
    return [(a, 1_000_000 * (i + 1)) for i, a in enumerate(accts)]


def test_claims_pay_once_against_the_latest_root(chain: EVM) -> None:
    entries = _entries()
    root = evm.rewards_root(entries)
    chain.submit(checkpoint(1, SET, root=root))
    acct, cum = entries[2]
    proof = evm.claim_proof(entries, 2)
    assert_reverts("InvalidProof()", chain.claim, acct, cum + 1, proof)  # wrong amount
    # wrong proof
    assert_reverts("InvalidProof()", chain.claim, acct, cum, evm.claim_proof(entries, 1))
    receipt = chain.claim(acct, cum, proof)
    assert chain.token.functions.balanceOf(Web3.to_checksum_address(acct)).call() == cum
    assert_reverts("NothingToClaim(uint256,uint256)", chain.claim, acct, cum, proof)  # double claim
    assert receipt["gasUsed"] < 125_000  # the token's very first mint also creates totalSupply

    # more withdrawn on loconet: a new root; the old proof is dead, the new one pays the difference
    entries2 = [(a, c + (500 if a == acct else 0)) for a, c in entries]
    chain.submit(checkpoint(2, SET, root=evm.rewards_root(entries2)))
    assert_reverts("InvalidProof()", chain.claim, acct, cum, proof)  # old root
    chain.claim(acct, cum + 500, evm.claim_proof(entries2, 2))
    assert chain.token.functions.balanceOf(Web3.to_checksum_address(acct)).call() == cum + 500
    # a late claimant is still paid in full against the newest root
    late, late_cum = entries2[4]
    late_receipt = chain.claim(late, late_cum, evm.claim_proof(entries2, 4))
    assert late_receipt["gasUsed"] < 90_000, late_receipt["gasUsed"]  # a first claim of an account
    assert chain.token.functions.totalSupply().call() == cum + 500 + late_cum


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
