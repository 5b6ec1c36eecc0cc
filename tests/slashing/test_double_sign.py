"""Double sign: CometBFT's duplicate-vote evidence -> slash once, jail, tombstone."""

from __future__ import annotations

from abci_app.bank import keeper as bank
from abci_app.pb import abci
from abci_app.staking import keeper as sk
from tests.kits.stakekit import LOCO, bond_msg, new_staking_chain, unbond_msg


def test_evidence_slashes_once_and_tombstones() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO, 10 * LOCO, 10 * LOCO + 3])
    bad = c.vals[3].address
    c.blocks(2)
    supply = bank.get_supply(c.store)
    resp = c.block([], evidence=[(bad, c.height - 1)])
    v = c.validator(bad)
    penalty = (10 * LOCO + 3) * 5 // 100 + 1  # 5 %, rounded up
    assert (v.slashed, v.tokens, v.tombstoned, v.jailed, v.power) == (
        penalty,
        10 * LOCO + 3 - penalty,
        True,
        True,
        0,
    )
    assert bank.get_supply(c.store) == supply - penalty
    assert [u.power for u in resp.validator_updates] == [0]
    assert {"validator.slashed", "validator.jailed", "validator.tombstoned"} <= {
        e.type for e in resp.events
    }
    # the same evidence again, or another equivocation: no second slash
    c.block([], evidence=[(bad, c.height - 2), (bad, c.height - 1)])
    assert c.validator(bad).slashed == penalty
    assert bank.get_supply(c.store) == supply - penalty


def test_evidence_also_slashes_unbonding_created_after_the_infraction() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO], staking={"unbonding_blocks": 50})
    bad, d = c.vals[1].address, c.keys[0]
    c.ok(d, [bond_msg(bad, 4 * LOCO)])
    c.ok(d, [unbond_msg(bad, LOCO)])
    infraction = c.height + 1
    c.block([])
    c.ok(d, [unbond_msg(bad, 2 * LOCO)])  # tries to run away with the stake after equivocating
    c.block([], evidence=[(bad, infraction)])
    got = sorted(e.amount for e in sk.iterate_unbondings(c.store, bad))
    assert got == [LOCO, 2 * LOCO - 2 * LOCO * 5 // 100]


def test_old_or_unknown_evidence_is_ignored() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO], slashing={"max_evidence_age_blocks": 3})
    c.blocks(6)
    c.block([], evidence=[(c.vals[1].address, 1), (b"\x09" * 20, c.height)])
    assert (
        c.validator(c.vals[1].address).slashed == 0
        and not c.validator(c.vals[1].address).tombstoned
    )


def test_light_client_attack_evidence_is_not_a_double_sign() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO])
    h = c.height + 1
    req = abci.RequestFinalizeBlock(height=h, hash=b"\x01" * 32)
    m = req.misbehavior.add(type=abci.MisbehaviorType.LIGHT_CLIENT_ATTACK, height=h - 1)
    m.validator.address = c.vals[1].address
    c.app.finalize_block(req)
    c.app.commit(abci.RequestCommit())
    assert not c.validator(c.vals[1].address).tombstoned
