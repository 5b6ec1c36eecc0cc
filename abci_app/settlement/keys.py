"""settlement state layout (see README.md)::

0x60                          -> Params
0x61 | len(cons) | cons       -> 20-byte EVM address   (a validator's settlement key)
0x62 | len(evm) | evm         -> consensus address      (reverse index: one validator per key)
0x63 | len(evm) | evm         -> u128 cumulative uloco withdrawn to that EVM address
0x64 | u64 number             -> Checkpoint
0x65                          -> u64 number of the newest checkpoint (pending or final)
0x66                          -> SignerSet that signs the next checkpoint
0x67                          -> u64 vote_extensions_enable_height (from genesis consensus params)
0x68 | len(evm) | evm         -> u64 leaf index of that EVM address in the rewards tree
0x69 | u64 level | u64 index  -> 32-byte node of the rewards tree (level 0: the leaves)
0x6a                          -> u64 number of leaves of the rewards tree
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
LEAF_INDEX_PREFIX = b"\x68"
TREE_NODE_PREFIX = b"\x69"
LEAF_COUNT_KEY = b"\x6a"
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
    LEAF_INDEX_PREFIX,
    TREE_NODE_PREFIX,
    LEAF_COUNT_KEY,
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


def leaf_index_key(evm_address: bytes) -> bytes:
    return LEAF_INDEX_PREFIX + lp(evm_address)


def parse_leaf_index_key(key: bytes) -> bytes:
    """Inverse of ``leaf_index_key``: the EVM address."""
    r = KeyReader(key, LEAF_INDEX_PREFIX)
    evm_address = r.lp()
    r.end()
    return evm_address


def tree_node_key(level: int, index: int) -> bytes:
    return TREE_NODE_PREFIX + u64_key(level) + u64_key(index)


def parse_tree_node_key(key: bytes) -> tuple[int, int]:
    """Inverse of ``tree_node_key``: (level, index)."""
    r = KeyReader(key, TREE_NODE_PREFIX)
    level = r.u64()
    index = r.u64()
    r.end()
    return level, index
