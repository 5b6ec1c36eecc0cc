"""settlement state layout (see README.md)::

0x60                          -> Params
0x61 | len(cons) | cons       -> 20-byte EVM address   (a validator's settlement key)
0x62 | len(evm) | evm         -> consensus address      (reverse index: one validator per key)
0x63 | len(evm) | evm         -> u128 cumulative uloco withdrawn to that EVM address
0x64 | u64 number             -> Checkpoint
0x65                          -> u64 number of the newest checkpoint (pending or final)
0x66                          -> SignerSet that signs the next checkpoint
0x67                          -> u64 vote_extensions_enable_height (from genesis consensus params)
"""

from abci_app.bank.keys import module_address
from abci_app.encoding import KeyReader, lp, u64_key

PARAMS_KEY = b"\x60"
SETTLEMENT_KEY_PREFIX = b"\x61"
KEY_OWNER_PREFIX = b"\x62"
CLAIM_PREFIX = b"\x63"
CHECKPOINT_PREFIX = b"\x64"
LATEST_CHECKPOINT_KEY = b"\x65"
SIGNER_SET_KEY = b"\x66"
VOTE_EXTENSIONS_HEIGHT_KEY = b"\x67"
# every key this module writes starts with one of these (ModuleSpec.key_prefixes)
KEY_PREFIXES: tuple[bytes, ...] = (
    PARAMS_KEY,
    SETTLEMENT_KEY_PREFIX,
    KEY_OWNER_PREFIX,
    CLAIM_PREFIX,
    CHECKPOINT_PREFIX,
    LATEST_CHECKPOINT_KEY,
    SIGNER_SET_KEY,
    VOTE_EXTENSIONS_HEIGHT_KEY,
)

# Module account holding every uloco withdrawn to the EVM chain (no key can sign for it).
SETTLEMENT_ESCROW = module_address("settlement_escrow")


def settlement_key_key(validator: bytes) -> bytes:
    return SETTLEMENT_KEY_PREFIX + lp(validator)


def parse_settlement_key_key(key: bytes) -> bytes:
    """Inverse of ``settlement_key_key``: the consensus address."""
    r = KeyReader(key, SETTLEMENT_KEY_PREFIX)
    validator = r.lp()
    r.end()
    return validator


def key_owner_key(evm_address: bytes) -> bytes:
    return KEY_OWNER_PREFIX + lp(evm_address)


def parse_key_owner_key(key: bytes) -> bytes:
    """Inverse of ``key_owner_key``: the EVM address."""
    r = KeyReader(key, KEY_OWNER_PREFIX)
    evm_address = r.lp()
    r.end()
    return evm_address


def claim_key(evm_address: bytes) -> bytes:
    return CLAIM_PREFIX + lp(evm_address)


def parse_claim_key(key: bytes) -> bytes:
    """Inverse of ``claim_key``: the EVM address."""
    r = KeyReader(key, CLAIM_PREFIX)
    evm_address = r.lp()
    r.end()
    return evm_address


def checkpoint_key(number: int) -> bytes:
    return CHECKPOINT_PREFIX + u64_key(number)


def parse_checkpoint_key(key: bytes) -> int:
    """Inverse of ``checkpoint_key``: the checkpoint number."""
    r = KeyReader(key, CHECKPOINT_PREFIX)
    number = r.u64()
    r.end()
    return number
