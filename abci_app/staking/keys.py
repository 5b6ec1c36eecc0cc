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
from abci_app.encoding import KeyReader, lp, u64_key

VALIDATOR_PREFIX = b"\x10"
BOND_PREFIX = b"\x11"
UNBONDING_PREFIX = b"\x12"
UNBONDING_QUEUE_PREFIX = b"\x13"
PARAMS_KEY = b"\x14"
NEXT_UNBONDING_ID_KEY = b"\x15"
# every key this module writes starts with one of these (ModuleSpec.key_prefixes)
KEY_PREFIXES: tuple[bytes, ...] = (
    VALIDATOR_PREFIX,
    BOND_PREFIX,
    UNBONDING_PREFIX,
    UNBONDING_QUEUE_PREFIX,
    PARAMS_KEY,
    NEXT_UNBONDING_ID_KEY,
)

BONDED_POOL = module_address("bonded_pool")
UNBONDING_POOL = module_address("unbonding_pool")


def validator_key(cons_address: bytes) -> bytes:
    return VALIDATOR_PREFIX + lp(cons_address)


def parse_validator_key(key: bytes) -> bytes:
    """Inverse of ``validator_key``: the consensus address."""
    r = KeyReader(key, VALIDATOR_PREFIX)
    cons_address = r.lp()
    r.end()
    return cons_address


def bond_key(cons_address: bytes, delegator: bytes) -> bytes:
    return BOND_PREFIX + lp(cons_address) + lp(delegator)


def parse_bond_key(key: bytes) -> tuple[bytes, bytes]:
    """Inverse of ``bond_key``: (consensus address, delegator)."""
    r = KeyReader(key, BOND_PREFIX)
    cons_address, delegator = r.lp(), r.lp()
    r.end()
    return cons_address, delegator


def bonds_prefix(cons_address: bytes) -> bytes:
    return BOND_PREFIX + lp(cons_address)


def unbonding_key(cons_address: bytes, entry_id: int) -> bytes:
    return UNBONDING_PREFIX + lp(cons_address) + u64_key(entry_id)


def parse_unbonding_key(key: bytes) -> tuple[bytes, int]:
    """Inverse of ``unbonding_key``: (consensus address, entry id)."""
    r = KeyReader(key, UNBONDING_PREFIX)
    cons_address, entry_id = r.lp(), r.u64()
    r.end()
    return cons_address, entry_id


def unbondings_prefix(cons_address: bytes) -> bytes:
    return UNBONDING_PREFIX + lp(cons_address)


def queue_key(completion_height: int, entry_id: int) -> bytes:
    return UNBONDING_QUEUE_PREFIX + u64_key(completion_height) + u64_key(entry_id)


def parse_queue_key(key: bytes) -> tuple[int, int]:
    """Inverse of ``queue_key``: (completion height, entry id)."""
    r = KeyReader(key, UNBONDING_QUEUE_PREFIX)
    completion_height, entry_id = r.u64(), r.u64()
    r.end()
    return completion_height, entry_id
