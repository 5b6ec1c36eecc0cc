"""The validator set as the state machine knows it (consensus key, operator account, power)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from abci_app.codec.address import address_from_pubkey, from_bech32
from abci_app.encoding import decode_msg, encode_msg
from abci_app.pb import abci, state_pb2
from abci_app.staking.keys import VALIDATOR_PREFIX, validator_key
from abci_app.store import CacheKV, KVReader

if TYPE_CHECKING:
    from abci_app.context import Ctx


def iterate_validators(store: KVReader) -> Iterator[tuple[bytes, state_pb2.Validator]]:
    """Validators in consensus-address order."""
    end = bytes([VALIDATOR_PREFIX[0] + 1])
    for k, v in store.iterate(VALIDATOR_PREFIX, end):
        yield k[2:], decode_msg(state_pb2.Validator, v)


def set_validator(store: CacheKV, v: state_pb2.Validator) -> None:
    store.set(validator_key(address_from_pubkey(v.pub_key)), encode_msg(v))


def init_genesis(
    store: CacheKV, state: dict[str, Any], genesis_validators: list[abci.ValidatorUpdate]
) -> None:
    """Record CometBFT's genesis validators; ``state["validators"]`` maps a consensus public key
    (base64) to the operator account that receives its fees. Without an entry, fees go to the
    account whose address equals the consensus address."""
    import base64

    operators: dict[bytes, tuple[bytes, str]] = {}
    for i, entry in enumerate(state.get("validators", [])):
        pk = base64.b64decode(entry["pub_key"], validate=True)
        operators[pk] = (from_bech32(entry["operator"]), str(entry.get("moniker", "")))
    for gv in genesis_validators:
        pk = gv.pub_key.ed25519
        op, moniker = operators.get(pk, (address_from_pubkey(pk), ""))
        set_validator(store, state_pb2.Validator(pub_key=pk, operator=op, power=gv.power, moniker=moniker))


def distribute_fees(ctx: "Ctx") -> None:
    """Fees collected in this block go to the validators pro rata by power
    (``bank.split_pro_rata``: truncating shares, dust one uloco each to the largest powers)."""
    from abci_app.bank import keeper as bank
    from abci_app.bank.events import fee_paid_event
    from abci_app.bank.keys import FEE_COLLECTOR

    fees = bank.get_balance(ctx.store, FEE_COLLECTOR)
    if not fees:
        return
    vals = list(iterate_validators(ctx.store))
    operator = {addr: v.operator for addr, v in vals}
    for cons_addr, share in bank.split_pro_rata(fees, [(a, v.power) for a, v in vals]):
        bank.send(ctx.store, FEE_COLLECTOR, operator[cons_addr], share)
        ctx.emit(fee_paid_event(operator[cons_addr], share))
