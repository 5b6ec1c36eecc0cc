"""``loconet tx settlement sign-pending``'s signature (node/evm/sign.py): a member whose vote
extension missed a checkpoint signs it by transaction from what its node reports, and the chain
accepts that signature; nothing is owed by a non-member, a member that signed, or once final."""

from __future__ import annotations

from dataclasses import replace

from abci_app.pb import settlement_pb2, tx_pb2
from node.evm.sign import owed_signature
from tests.kits.chainkit import CHAIN_ID
from tests.kits.settlekit import new_net, settlement_secret


def _sign_msg(number: int, signature: bytes) -> tx_pb2.Msg:
    return tx_pb2.Msg(
        sign_checkpoint=settlement_pb2.MsgSignCheckpoint(number=number, signature=signature)
    )


def test_a_member_whose_extension_missed_the_checkpoint_signs_it_by_transaction() -> None:
    net = new_net()
    for a in net.apps[2:]:  # two of four nodes run without their settlement key
        a.extension_keys = replace(a.extension_keys, settlement=None)
    net.run_until(lambda: net.query("/settlement")["latest"] == 1)
    net.blocks(2)
    pending = net.query("/checkpoint/pending")
    params = net.query("/settlement")["params"]
    assert pending["number"] == 1 and pending["signed_power"] == 200 and not pending["final"]
    # val0 signed in its extension; a key outside the set owes nothing
    assert owed_signature(pending, params, CHAIN_ID, settlement_secret(0)) is None
    assert owed_signature(pending, params, CHAIN_ID, b"\x07" * 32) is None
    sig = owed_signature(pending, params, CHAIN_ID, settlement_secret(2))
    assert sig is not None
    net.ok(net.keys[0], [_sign_msg(1, sig)])
    cp = net.query("/checkpoint/1")
    assert cp["final"] and cp["signed_power"] == 300
    assert owed_signature(cp, params, CHAIN_ID, settlement_secret(3)) is None  # final: nothing owed
