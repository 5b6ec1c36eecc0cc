"""`testnet up --param module.key=N` is checked by the module's own genesis rules before
anything is created: a bad value made the node's InitChain fail and `up` wait out its timeout
('did not produce agreeing blocks'), and a module the genesis does not carry was dropped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from node.local import testnet
from tests.kits.clikit import run as run_cli


@pytest.mark.parametrize(
    ("param", "says"),
    [
        ("auth.bogus=1", "unknown keys ['bogus']"),
        ("auth.min_fee_per_byte=99999999999999999", "above 2^64-1"),
        ("providers.min_stake=1", "--param takes the params of auth, jobs"),
        ("nomodule.x=1", "--param takes the params of"),
        ("jobs.nope=1", "unknown keys ['nope']"),
        ("slashing.signed_blocks_window=0", "signed_blocks_window"),
    ],
)
def test_invalid_param_is_refused_before_creating(tmp_path: Path, param: str, says: str) -> None:
    with pytest.raises(testnet.TestnetError, match="bad --param"):
        testnet.parse_params([param])
    d = tmp_path / "net"
    r = run_cli("testnet", "up", "--dir", str(d), "--param", param, "-o", "json")
    assert r.returncode != 0
    err = json.loads(r.stdout)["error"]
    assert "bad --param" in err and says in err, err
    assert not d.exists()


def test_valid_params_pass() -> None:
    p = testnet.parse_params(
        ["auth.min_fee_per_byte=0", "auth.min_fee_per_msg=0", "settlement.checkpoint_interval=6"]
    )
    assert p["auth"] == {"min_fee_per_byte": 0, "min_fee_per_msg": 0}
    assert p["settlement"] == {"checkpoint_interval": 6}
    assert testnet.parse_params([]) == testnet.parse_params([])
