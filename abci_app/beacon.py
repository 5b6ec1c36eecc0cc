"""The randomness beacon: a verifiable random function (VRF) share per validator per height,
aggregated from the vote extensions a block carries (abci_app/vote_extensions.py).

Why a VRF and not an ed25519 signature: ed25519 *signing* is deterministic, but *verification*
accepts ``(R, S)`` for any nonce ``r`` the key holder picks (``S = r + H(R, A, M) a``), so a
validator can produce as many valid signatures over the same message as it likes and grind the
beacon with its own share. A VRF's output is unique: for a public key and an input there is
exactly one output a valid proof can open (only the proof's nonce varies), so each validator has
exactly one share per height.

Construction: ECVRF (the structure of RFC 9381) on edwards25519 with the validator's consensus
key (secret scalar ``x`` = the clamped first half of sha512(seed), public key ``Y = xB``, the same
32 bytes CometBFT holds). Domain-separated, so not byte-compatible with the RFC suites:

    alpha = "loconet/beacon/v1" | u64 len(chain_id) | chain_id | u64 height
    H     = from_uniform(sha512(D_H2C | Y | alpha)[:32])   (Elligator 2, cofactor cleared)
    Gamma = x H
    k     = sha512(sha512(seed)[32:] | H) mod L            (deterministic nonce)
    c     = sha512(D_C | H | Gamma | kB | kH)[:16]
    s     = k + c x mod L
    proof = Gamma (32) | c (16) | s (32)                   80 bytes
    verify: Y and Gamma valid points of the prime-order subgroup, s < L,
            U = sB - cY, V = sH - c Gamma, c == sha512(D_C | H | Gamma | U | V)[:16]
    output = sha256(D_O | Gamma)

Gamma is unique (Y and Gamma lie in the prime-order subgroup and c binds ``log_B Y = log_H Gamma``),
so the output is unique. Block beacon: ``block_beacon(shares)`` = sha256(D_B | for each share sorted
by validator address: address (20) | output (32)).
"""

from __future__ import annotations

import hashlib

from nacl import bindings as na
from nacl.exceptions import RuntimeError as NaclRuntimeError

PROOF_BYTES = 80
_D_ALPHA = b"loconet/beacon/v1"
_D_H2C = b"loconet/vrf/v1/h2c"
_D_C = b"loconet/vrf/v1/challenge"
_D_O = b"loconet/vrf/v1/output"
_D_B = b"loconet/beacon/v1/block"
_L = 2**252 + 27742317777372353535851937790883648493


def alpha(chain_id: str, height: int) -> bytes:
    c = chain_id.encode()
    return _D_ALPHA + len(c).to_bytes(8, "big") + c + height.to_bytes(8, "big")


def _scalar(n: int) -> bytes:
    return (n % _L).to_bytes(32, "little")


def _h2c(pub: bytes, msg: bytes) -> bytes:
    return na.crypto_core_ed25519_from_uniform(hashlib.sha512(_D_H2C + pub + msg).digest()[:32])


def _challenge(*points: bytes) -> int:
    return int.from_bytes(hashlib.sha512(_D_C + b"".join(points)).digest()[:16], "little")


def prove(seed: bytes, msg: bytes, *, nonce: int | None = None) -> bytes:
    """The 80-byte proof of this key's share for ``msg`` (deterministic). ``nonce`` replaces the
    derived k: what a grinder would try; the proof differs, the output does not (tests)."""
    h = hashlib.sha512(seed).digest()
    a = bytearray(h[:32])
    a[0] &= 248
    a[31] &= 127
    a[31] |= 64
    x = int.from_bytes(a, "little") % _L
    pub = na.crypto_scalarmult_ed25519_base_noclamp(_scalar(x))
    hp = _h2c(pub, msg)
    gamma = na.crypto_scalarmult_ed25519_noclamp(_scalar(x), hp)
    k = (
        int.from_bytes(hashlib.sha512(h[32:] + hp).digest(), "little") % _L
        if nonce is None
        else nonce % _L
    )
    c = _challenge(
        hp,
        gamma,
        na.crypto_scalarmult_ed25519_base_noclamp(_scalar(k)),
        na.crypto_scalarmult_ed25519_noclamp(_scalar(k), hp),
    )
    s = (k + c * x) % _L
    return gamma + c.to_bytes(16, "little") + _scalar(s)


def verify(pub: bytes, msg: bytes, proof: bytes) -> bytes | None:
    """The share's 32-byte output if ``proof`` is valid for ``pub`` and ``msg``, else None."""
    if len(pub) != 32 or len(proof) != PROOF_BYTES:
        return None
    gamma, c_b, s_b = proof[:32], proof[32:48], proof[48:]
    s = int.from_bytes(s_b, "little")
    if (
        s >= _L
        or not na.crypto_core_ed25519_is_valid_point(pub)
        or not na.crypto_core_ed25519_is_valid_point(gamma)
    ):
        return None
    c = int.from_bytes(c_b, "little")
    try:
        hp = _h2c(pub, msg)
        u = na.crypto_core_ed25519_sub(
            na.crypto_scalarmult_ed25519_base_noclamp(_scalar(s)),
            na.crypto_scalarmult_ed25519_noclamp(_scalar(c), pub),
        )
        v = na.crypto_core_ed25519_sub(
            na.crypto_scalarmult_ed25519_noclamp(_scalar(s), hp),
            na.crypto_scalarmult_ed25519_noclamp(_scalar(c), gamma),
        )
    except (NaclRuntimeError, ValueError, TypeError):  # a zero scalar or an identity result
        return None
    if _challenge(hp, gamma, u, v) != c:
        return None
    return output(proof)


def output(proof: bytes) -> bytes:
    """The share's output (call only on a proof ``verify`` accepted)."""
    return hashlib.sha256(_D_O + proof[:32]).digest()


def block_beacon(shares: list[tuple[bytes, bytes]]) -> bytes:
    """sha256 over (validator address, output) sorted by address; b"" when there are none."""
    if not shares:
        return b""
    return hashlib.sha256(_D_B + b"".join(a + o for a, o in sorted(shares))).digest()
