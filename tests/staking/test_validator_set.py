"""The active set: max_validators by stake, ties by lower consensus address; power 0 removes."""

from __future__ import annotations

from abci_app.codec.address import address_from_pubkey
from abci_app.staking import keeper as sk
from tests.kits.chainkit import signer
from tests.kits.stakekit import LOCO, bond_msg, create_validator_msg, new_staking_chain


def test_max_validators_by_stake_with_address_tie_break() -> None:
    c = new_staking_chain([10 * LOCO, 10 * LOCO], staking={"max_validators": 2})
    assert set(sk.compute_active_set(c.store)) == {c.vals[0].address, c.vals[1].address}
    # a third validator with the same stake: only the lower address of the tied ones stays
    newk = signer(7000)
    resp = c.ok(c.keys[0], [create_validator_msg(newk, 10 * LOCO)])
    ordered = sorted([c.vals[0].address, c.vals[1].address, newk.address])
    active = sk.compute_active_set(c.store)
    assert set(active) == set(ordered[:2])
    if newk.address == ordered[2]:
        assert list(resp.validator_updates) == []
    else:
        assert {(u.power) for u in resp.validator_updates} == {10, 0}
    # more stake moves the outsider in and the weakest out
    out = ordered[2]
    resp = c.ok(c.keys[1], [bond_msg(out, 1 * LOCO)])
    assert set(sk.compute_active_set(c.store)) == {out, ordered[0]}
    assert sorted(u.power for u in resp.validator_updates) == [0, 11]
    assert c.validator(ordered[1]).power == 0 and c.validator(out).power == 11


def test_updates_are_in_address_order_and_deterministic() -> None:
    a = new_staking_chain([10 * LOCO, 20 * LOCO, 30 * LOCO])
    b = new_staking_chain([10 * LOCO, 20 * LOCO, 30 * LOCO])
    for c in (a, b):
        for i, v in enumerate(c.vals):
            c.ok(c.keys[0], [bond_msg(v.address, (i + 1) * LOCO)])
    assert a.store.app_hash == b.store.app_hash
    resp = a.init_response  # type: ignore[attr-defined]
    addrs = [address_from_pubkey(u.pub_key.ed25519) for u in resp.validators]
    assert addrs == sorted(addrs)
