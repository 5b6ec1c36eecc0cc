"""Staking state layout (one-byte prefixes 0x10..0x15, length-prefixed addresses).

    0x10 | lp(cons)                      -> Validator            (staking_pb2.Validator)
    0x11 | lp(cons) | lp(delegator)      -> u128 bonded uloco    (a bond; never stored as 0)
    0x12 | lp(cons) | u64(id)            -> UnbondingEntry       (by validator: slashing)
    0x13 | u64(completion) | u64(id)     -> lp(cons)             (maturity queue index)
    0x14                                 -> Params
    0x15                                 -> u64 next unbonding id

Module accounts (plain bank balances no key can sign for): ``BONDED_POOL`` holds every bond,
``UNBONDING_POOL`` every unbonding entry, so bank's ``sum(balances) == supply`` covers stake.
"""

from __future__ import annotations

from abci_app.bank.keys import module_address
from abci_app.encoding import lp, u64_key

VALIDATOR_PREFIX = b"\x10"
BOND_PREFIX = b"\x11"
UNBONDING_PREFIX = b"\x12"
UNBONDING_QUEUE_PREFIX = b"\x13"
PARAMS_KEY = b"\x14"
NEXT_UNBONDING_ID_KEY = b"\x15"

BONDED_POOL = module_address("bonded_pool")
UNBONDING_POOL = module_address("unbonding_pool")



def validator_key(cons_address: bytes) -> bytes:
    return VALIDATOR_PREFIX + lp(cons_address)


def bond_key(cons_address: bytes, delegator: bytes) -> bytes:
    return BOND_PREFIX + lp(cons_address) + lp(delegator)


def bonds_prefix(cons_address: bytes) -> bytes:
    return BOND_PREFIX + lp(cons_address)


def unbonding_key(cons_address: bytes, entry_id: int) -> bytes:
    return UNBONDING_PREFIX + lp(cons_address) + u64_key(entry_id)


def unbondings_prefix(cons_address: bytes) -> bytes:
    return UNBONDING_PREFIX + lp(cons_address)


def queue_key(completion_height: int, entry_id: int) -> bytes:
    return UNBONDING_QUEUE_PREFIX + u64_key(completion_height) + u64_key(entry_id)
