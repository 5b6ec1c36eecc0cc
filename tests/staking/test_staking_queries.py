from __future__ import annotations

from abci_app.pb import abci
from tests.kits.stakekit import LOCO, bond_msg, new_staking_chain, unbond_msg


def test_validators_validator_and_params_queries() -> None:
    c = new_staking_chain(
        [10 * LOCO, 20 * LOCO], staking={"unbonding_blocks": 9, "block_reward": 5}
    )
    cons = c.vals[0].address
    c.ok(c.keys[0], [bond_msg(cons, 2 * LOCO)])
    c.ok(c.keys[0], [unbond_msg(cons, LOCO)])
    vals = c.query("/validators")
    assert [v["address"] for v in vals] == sorted(v.address.hex().upper() for v in c.vals)
    v0 = next(v for v in vals if v["address"] == cons.hex().upper())
    assert (v0["power"], v0["tokens"], v0["self_bond"], v0["status"], v0["moniker"]) == (
        11,
        11 * LOCO,
        10 * LOCO,
        "active",
        "val0",
    )
    one = c.query(f"/validator/{cons.hex()}")
    assert {b["amount"] for b in one["bonds"]} == {10 * LOCO, LOCO}
    assert [(u["amount"], u["completion_height"]) for u in one["unbonding"]] == [
        (LOCO, c.height + 9)
    ]
    p = c.query("/params")
    assert p["staking"]["unbonding_blocks"] == 9 and p["staking"]["block_reward"] == 5
    assert p["slashing"]["signed_blocks_window"] == 100
    assert c.query("/params/slashing") == p["slashing"]


def test_invalid_validator_query() -> None:
    c = new_staking_chain([10 * LOCO])
    for path in ("/validator/zz", "/validator/" + "00" * 20, "/validator", "/params/nope"):
        assert c.app.query(abci.RequestQuery(path=path)).code != 0
