"""The watchtower: finds checkpoints the contract accepted that loconet never made, and builds the
evidence that slashes their signers (``MsgReportForgedCheckpoint``).

For each ``CheckpointAccepted`` event of the deployment, the transaction's calldata is decoded
(``Checkpoints.submit``'s arguments: the checkpoint, the signer set, the signatures) and the
checkpoint compared with loconet's checkpoint of that number: a missing one, or any differing
field (height, app hash, rewards root, next set hash), makes it forged, and the signatures in
the calldata are the evidence. Anyone can run it (``loconet evm report-forged``); the chain
re-checks everything deterministically. A checkpoint submitted through another contract (its
transaction's calldata is not ``submit``'s) is logged and not checked: finding the inner call
needs a trace, which this does not do."""

from __future__ import annotations

import logging
from typing import Any

from web3 import Web3

from abci_app.pb import settlement_pb2
from node.evm import client
from node.evm.relayer import CheckpointSource

log = logging.getLogger("loconet.watch")


def _field(x: Any, name: str, index: int) -> Any:
    return x[name] if isinstance(x, dict) else x[index]


def forged_checkpoints(
    w3: Web3, d: client.Deployment, source: CheckpointSource, from_block: int = 0
) -> list[settlement_pb2.MsgReportForgedCheckpoint]:
    """One report per accepted checkpoint whose content loconet never produced."""
    cps = client.checkpoints(w3, d)
    reports = []
    for ev in cps.events.CheckpointAccepted.get_logs(from_block=from_block):
        number = int(ev["args"]["number"])
        tx = w3.eth.get_transaction(ev["transactionHash"])
        try:
            _, args = cps.decode_function_input(tx["input"])
        except Exception:  # noqa: BLE001 - web3's no-matching-selector error type varies
            # submitted through another contract: its calldata is not submit's; a trace
            # (debug_traceTransaction) would find the inner call: not done here
            log.warning("checkpoint %d came through another contract: not checked", number)
            continue
        cp = args["cp"]
        head = (
            int(_field(cp, "number", 0)),
            int(_field(cp, "height", 1)),
            bytes(_field(cp, "appHash", 2)),
            bytes(_field(cp, "rewardsRoot", 3)),
            bytes(_field(cp, "nextSetHash", 4)),
        )
        ours = source.checkpoint(number)
        if ours is not None and head == (
            int(ours["number"]),
            int(ours["height"]),
            bytes.fromhex(ours["app_hash"]),
            bytes.fromhex(ours["rewards_root"]),
            bytes.fromhex(ours["next_set_hash"]),
        ):
            continue
        reports.append(
            settlement_pb2.MsgReportForgedCheckpoint(
                evm_chain_id=int(d.evm_chain_id),
                evm_contract=bytes.fromhex(d.distributor.removeprefix("0x")),
                number=head[0],
                height=head[1],
                app_hash=head[2],
                rewards_root=head[3],
                next_set_hash=head[4],
                signatures=[bytes(s) for s in args["signatures"]],
            )
        )
    return reports
