"""The bytes loconet and the EVM contracts agree on (contracts/src/*.sol say the same).

- ``checkpoint_digest``: keccak256(abi.encode(keccak256("loconet.Checkpoint.v2"),
  keccak256(chain_id), uint256 evm_chain_id, address contract, uint64 number, uint64 height,
  bytes32 app_hash, bytes32 rewards_root, bytes32 next_set_hash)); validators sign this 32-byte
  digest itself (no message prefix). The EVM chain id and the contract name the one deployment
  the checkpoint is for (the contract puts ``block.chainid`` and ``address(this)``).
- ``set_hash``: keccak256(abi.encode(address[] signers, uint256[] powers, uint256 keyless_power)),
  signers ascending; ``keyless_power`` is the power of the validators without a settlement key
  (they count in the total, as not signing).
- ``claim_leaf``: keccak256(keccak256(abi.encode(address account, uint256 cumulative))).
- ``rewards_root``/``claim_proof``: leaves in the order given (the chain: first withdrawal
  first, so a new address appends and the tree updates in O(log n)); each level pairs
  neighbours (i, i+1) and hashes keccak256(min || max) (OpenZeppelin MerkleProof's sorted pairs);
  an odd last node moves up unchanged; the root of no leaves is 32 zero bytes.
- signatures: 65 bytes r || s || v (v 27 or 28), s in the lower half of the curve order (a
  high-s twin is refused here and by the contract: one valid signature per key and digest).

secp256k1 comes from ``coincurve`` (libsecp256k1, RFC 6979 deterministic signing), keccak-256
from ``pycryptodome``: both pure functions of their input, so every node gets the same answer.
"""

from __future__ import annotations

from collections.abc import Sequence

from coincurve import PrivateKey, PublicKey
from Crypto.Hash import keccak

SECP256K1_N = 0xFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFEBAAEDCE6AF48A03BBFD25E8CD0364141
HALF_N = SECP256K1_N // 2
ZERO32 = bytes(32)


def keccak256(data: bytes) -> bytes:
    return keccak.new(digest_bits=256, data=data).digest()


CHECKPOINT_TYPEHASH = keccak256(b"loconet.Checkpoint.v2")


def word(n: int) -> bytes:
    """A uint256 ABI word."""
    if n < 0 or n >= 1 << 256:
        raise ValueError(f"{n} does not fit uint256")
    return n.to_bytes(32, "big")


def address_word(a: bytes) -> bytes:
    if len(a) != 20:
        raise ValueError("an EVM address is 20 bytes")
    return bytes(12) + a


def checkpoint_digest(
    chain_id: str,
    evm_chain_id: int,
    contract: bytes,
    number: int,
    height: int,
    app_hash: bytes,
    rewards_root: bytes,
    next_set_hash: bytes,
) -> bytes:
    for name, b in (
        ("app_hash", app_hash),
        ("rewards_root", rewards_root),
        ("next_set_hash", next_set_hash),
    ):
        if len(b) != 32:
            raise ValueError(f"{name} must be 32 bytes")
    return keccak256(
        CHECKPOINT_TYPEHASH
        + keccak256(chain_id.encode())
        + word(evm_chain_id)
        + address_word(contract)
        + word(number)
        + word(height)
        + app_hash
        + rewards_root
        + next_set_hash
    )


def set_hash(signers: Sequence[bytes], powers: Sequence[int], keyless_power: int = 0) -> bytes:
    n = len(signers)
    if n != len(powers):
        raise ValueError("signers and powers differ in length")
    head = word(96) + word(96 + 32 + 32 * n) + word(keyless_power)
    a = word(n) + b"".join(address_word(s) for s in signers)
    p = word(n) + b"".join(word(x) for x in powers)
    return keccak256(head + a + p)


def create_address(sender: bytes, nonce: int) -> bytes:
    """The address of the contract ``sender`` creates with ``nonce`` (CREATE:
    keccak256(rlp([sender, nonce]))[12:]); how a genesis names a deployment before it exists."""
    if len(sender) != 20 or not 0 <= nonce < 1 << 64:
        raise ValueError("sender must be 20 bytes and nonce a u64")
    if nonce == 0:
        n = b"\x80"
    elif nonce < 0x80:
        n = bytes([nonce])
    else:
        raw = nonce.to_bytes((nonce.bit_length() + 7) // 8, "big")
        n = bytes([0x80 + len(raw)]) + raw
    body = b"\x94" + sender + n
    return keccak256(bytes([0xC0 + len(body)]) + body)[12:]


def claim_leaf(account: bytes, cumulative: int) -> bytes:
    return keccak256(keccak256(address_word(account) + word(cumulative)))


def pair_hash(a: bytes, b: bytes) -> bytes:
    """An inner node: keccak256(min || max) (OpenZeppelin MerkleProof's sorted pairs)."""
    return keccak256(a + b if a <= b else b + a)


def _levels(leaves: list[bytes]) -> list[list[bytes]]:
    levels = [leaves]
    while len(levels[-1]) > 1:
        cur = levels[-1]
        nxt = [pair_hash(cur[i], cur[i + 1]) for i in range(0, len(cur) - 1, 2)]
        if len(cur) % 2:
            nxt.append(cur[-1])
        levels.append(nxt)
    return levels


def rewards_root(entries: Sequence[tuple[bytes, int]]) -> bytes:
    """Root over (address, cumulative) entries in leaf order (the chain keeps the same tree
    incrementally: ``keeper.update_leaf``)."""
    if not entries:
        return ZERO32
    return _levels([claim_leaf(a, c) for a, c in entries])[-1][0]


def claim_proof(entries: Sequence[tuple[bytes, int]], index: int) -> list[bytes]:
    """Sibling hashes from leaf ``index`` up to the root (what ``claim`` takes)."""
    levels = _levels([claim_leaf(a, c) for a, c in entries])
    proof = []
    for level in levels[:-1]:
        sib = index ^ 1
        if sib < len(level):
            proof.append(level[sib])
        index //= 2
    return proof


def verify_proof(root: bytes, leaf: bytes, proof: Sequence[bytes]) -> bool:
    h = leaf
    for p in proof:
        h = pair_hash(h, p)
    return h == root


# ------------------------------------------------------------------------------ keys


def address_of_public_key(pub: PublicKey) -> bytes:
    return keccak256(pub.format(compressed=False)[1:])[12:]


def address_of_private_key(secret: bytes) -> bytes:
    return address_of_public_key(PrivateKey(secret).public_key)


def sign_digest(secret: bytes, digest: bytes) -> bytes:
    """65-byte r || s || v (v = 27 + recovery id), low s (libsecp256k1 signs low-s)."""
    sig = PrivateKey(secret).sign_recoverable(digest, hasher=None)
    return sig[:64] + bytes([27 + sig[64]])


def recover(digest: bytes, sig: bytes) -> bytes | None:
    """The signer's 20-byte address, or None for anything but a well-formed low-s signature."""
    if len(digest) != 32 or len(sig) != 65 or sig[64] not in (27, 28):
        return None
    r, s = int.from_bytes(sig[:32], "big"), int.from_bytes(sig[32:64], "big")
    if not (1 <= r < SECP256K1_N and 1 <= s <= HALF_N):
        return None
    try:
        pub = PublicKey.from_signature_and_message(
            sig[:64] + bytes([sig[64] - 27]), digest, hasher=None
        )
    except ValueError:
        return None
    return address_of_public_key(pub)


def to_checksum(a: bytes) -> str:
    """EIP-55 mixed-case hex of a 20-byte address."""
    h = a.hex()
    k = keccak256(h.encode()).hex()
    return "0x" + "".join(
        c.upper() if c.isalpha() and int(k[i], 16) >= 8 else c for i, c in enumerate(h)
    )


def parse_address(s: str) -> bytes:
    """``0x`` + 40 hex digits (any case) -> 20 bytes; ValueError otherwise."""
    digits = s[2:] if isinstance(s, str) else ""
    # all 40 hex digits: bytes.fromhex skips spaces, so "0x" + 38 digits + 2 spaces was 19 bytes
    if not (
        isinstance(s, str)
        and len(s) == 42
        and s[:2] in ("0x", "0X")
        and all(c in "0123456789abcdefABCDEF" for c in digits)
    ):
        raise ValueError(f"EVM address {s!r} must be 0x followed by 40 hex digits")
    return bytes.fromhex(digits)
