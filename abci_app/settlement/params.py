"""settlement params (genesis ``settlement.params``; query ``/settlement``)."""

from __future__ import annotations

from typing import Any

from abci_app.encoding import decode_msg, encode_msg
from abci_app.pb import settlement_pb2
from abci_app.settlement import evm
from abci_app.settlement.keys import PARAMS_KEY
from abci_app.store import CacheKV, KVReader

DEFAULTS: dict[str, int] = {
    "checkpoint_interval": 100,  # blocks between checkpoints (~1 min at 0.55 s blocks)
    # The one deployment every checkpoint names (Gravity Bridge's peggy id): the EVM chain and
    # the RewardsDistributor's address. The defaults are a development deployment: anvil's chain
    # (31337) and the first contract its public account 0 creates (what `loconet testnet up
    # --evm` deploys); a real network writes its own in the genesis before deploying, and
    # `loconet evm deploy` refuses to deploy anywhere else.
    "evm_chain_id": 31337,
    # a validator whose key signed a checkpoint the chain never made (MsgReportForgedCheckpoint):
    # as a double sign (Cosmos slash_fraction_double_sign), then jailed for good and tombstoned
    "slash_fraction_forged_checkpoint_bps": 500,
    # 1: a validator without a settlement key never enters CometBFT's set (staking asks
    # ``requires_settlement_key``/``has_settlement_key``), so every bonded validator can sign.
    # A genesis without a settlement section stores 0 (``genesis.py``): no key is needed there.
    "require_settlement_key": 1,
}
DEFAULT_EVM_CONTRACT = "0x5fbdb2315678afecb367f032d93f642f64180aa3"


def params_from_json(d: dict[str, Any]) -> settlement_pb2.Params:
    unknown = set(d) - set(DEFAULTS) - {"evm_contract"}
    if unknown:
        raise ValueError(f"settlement.params: unknown keys {sorted(unknown)}")
    contract = d.get("evm_contract", DEFAULT_EVM_CONTRACT)
    try:
        contract_bytes = evm.parse_address(contract)
    except ValueError as e:
        raise ValueError(f"settlement.params.evm_contract: {e}") from None
    if contract_bytes == bytes(20):
        raise ValueError("settlement.params.evm_contract: the zero address is no deployment")
    vals: dict[str, int] = {}
    for k, default in DEFAULTS.items():
        v = d.get(k, default)
        if isinstance(v, bool) or not isinstance(v, (int, str)) or not str(v).isdigit():
            raise ValueError(f"settlement.params.{k}: must be a non-negative integer, got {v!r}")
        vals[k] = int(v)
    p = settlement_pb2.Params(**vals, evm_contract=contract_bytes)
    if p.slash_fraction_forged_checkpoint_bps > 10_000:
        raise ValueError("settlement.params.slash_fraction_forged_checkpoint_bps must be <= 10000")
    if p.require_settlement_key > 1:
        raise ValueError("settlement.params.require_settlement_key must be 0 or 1")
    if p.evm_chain_id < 1:
        raise ValueError("settlement.params.evm_chain_id must be an EVM chain id (>= 1)")
    if p.checkpoint_interval < 2:
        raise ValueError(
            "settlement.params.checkpoint_interval must be >= 2 (a checkpoint is signed the "
            "block after it is made)"
        )
    return p


def params_to_json(p: settlement_pb2.Params) -> dict[str, int | str]:
    out: dict[str, int | str] = {k: int(getattr(p, k)) for k in DEFAULTS}
    out["evm_contract"] = "0x" + p.evm_contract.hex()
    return out


def get_params(store: KVReader) -> settlement_pb2.Params:
    raw = store.get(PARAMS_KEY)
    if raw is None:
        return params_from_json({})
    return decode_msg(settlement_pb2.Params, raw)


def set_params(store: CacheKV, p: settlement_pb2.Params) -> None:
    store.set(PARAMS_KEY, encode_msg(p))
