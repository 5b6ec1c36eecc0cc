"""Regressions found in review: key-range bounds for 0xff addresses, evidence age vs unbonding."""

from __future__ import annotations

import json

import pytest

from abci_app.app import Application
from abci_app.slashing.keeper import clear_liveness
from abci_app.slashing.keys import missed_prefix, signing_info_key
from abci_app.store import CacheKV, MerkleStore
from tests.kits.chainkit import genesis_request, signer


@pytest.mark.parametrize("last", [0xFF, 0xFE, 0x00])
def test_clear_liveness_touches_only_its_validator(last: int) -> None:
    """A consensus address ending in 0xff once made the range unbounded and wiped every later key
    (other validators' liveness, providers, jobs)."""
    store = CacheKV(MerkleStore(None))
    cons = b"\x11" * 19 + bytes([last])
    other = b"\x11" * 18 + b"\x12\x00"  # sorts right after cons
    for i in range(3):
        store.set(missed_prefix(cons) + bytes([i]), b"\x01")
        store.set(missed_prefix(other) + bytes([i]), b"\x01")
    store.set(signing_info_key(cons), b"x")
    later = [b"\x40later-provider", b"\x52later-job", b"\xff\xffend"]
    for k in later:
        store.set(k, b"keep")
    clear_liveness(store, cons)
    assert not list(store.iterate(missed_prefix(cons), missed_prefix(cons) + b"\xff"))
    assert store.get(signing_info_key(cons)) is None
    assert len(list(store.iterate(missed_prefix(other), missed_prefix(other) + b"\xff"))) == 3
    assert all(store.get(k) == b"keep" for k in later)


def test_invalid_genesis_evidence_age_longer_than_unbonding() -> None:
    """Evidence older than the unbonding period would let a validator unbond before its double
    sign is judged; genesis refuses such params with a message that names both."""
    val = signer(1000)
    req = genesis_request({val.address: 10**12}, [(val, 10)])
    state = json.loads(req.app_state_bytes)
    state["slashing"] = {"params": {"max_evidence_age_blocks": "500"}}
    state.setdefault("staking", {})["params"] = {"unbonding_blocks": "100"}
    req.app_state_bytes = json.dumps(state).encode()
    app = Application(MerkleStore(None))
    with pytest.raises(
        ValueError, match="max_evidence_age_blocks .* exceeds staking.unbonding_blocks"
    ):
        app.init_chain(req)
    # equal is fine
    state["slashing"]["params"]["max_evidence_age_blocks"] = "100"
    req.app_state_bytes = json.dumps(state).encode()
    assert len(Application(MerkleStore(None)).init_chain(req).app_hash) == 32


def test_evidence_against_the_only_validator_with_power_empties_the_set() -> None:
    """Found by the invariant simulation (tests/kits/simkit.py): a double sign from a height when
    others were bonded, judged once the accused is the only validator with power. It is punished
    like any other (slashed, jailed, tombstoned) and the set it returns is empty, so CometBFT
    halts, as a Cosmos SDK chain would (abci_app/slashing/README.md). Pinned so that a change to
    this choice is deliberate."""
    from tests.kits.stakekit import LOCO, new_staking_chain, unbond_msg

    c = new_staking_chain([100 * LOCO, 100 * LOCO])
    v0, v1 = c.vals
    c.blocks(3)
    at = c.height  # both validators sign here
    c.ok(v1, [unbond_msg(v1.address, 100 * LOCO)])  # v1 leaves: v0 is the only one with power
    c.blocks(2)
    assert {cons for cons, p in c.comet_set(c.height + 2).items() if p} == {v0.address}
    resp = c.block([], evidence=[(v0.address, at)])
    assert [u.power for u in resp.validator_updates] == [0]
    assert c.validator(v0.address).tombstoned and c.validator(v0.address).jailed
    assert not c.comet_set(c.height + 2)
