"""Checking a block header the way a CometBFT light client does, for `--prove`.

A query proof is only as good as the app hash it is checked against. ``verified_app_hash``
fetches the signed header of a height (``/commit``) and the validator set of that height
(``/validators``) and checks, in CometBFT v0.38's own encodings:

1. the header hashes (RFC 6962 Merkle tree over its 14 proto-encoded fields) to the block id
   the commit signs;
2. the validator set hashes to the header's ``validators_hash``;
3. validators holding more than 2/3 of the set's power signed the commit (ed25519 over the
   length-delimited ``CanonicalVote``).

Which set: without more, the one the same node reports, so a node that forges a whole chain
with its own keys is caught only by the chain id. With a node home, ``node.client.trust`` trusts the
set from the genesis in it by skipping verification (CometBFT's light client rules), and the
forged chain is refused.

The ``tendermint`` stubs are imported inside the functions that use them (``# lazy: needs
abci_app.pb first``): they are importable only once abci_app.pb has put their folder on
sys.path, and the import sort would place a top-level ``from tendermint ...`` (a third-party
name to it) above that import.
"""

from __future__ import annotations

import base64
import calendar
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Protocol

from google.protobuf import timestamp_pb2, wrappers_pb2
from nacl.exceptions import BadSignatureError
from nacl.signing import VerifyKey

from abci_app.encoding import encode_uvarint
from abci_app.pb import keys_pb2  # noqa: F401  (puts the generated stubs on sys.path)
from node.client.rpc import Client


class HeaderTrust(Protocol):
    """What ``verified_app_hash`` needs of a trust anchor: the chain it trusts and a header
    checked from it (``node.client.trust.TrustStore`` is the one the node has; this module does not
    import it, since trust builds on the checks here)."""

    chain_id: str

    def verified_header(self, client: Client, height: int) -> dict[str, Any]: ...


class HeaderInvalid(Exception):
    pass


def _sha(b: bytes) -> bytes:
    return hashlib.sha256(b).digest()


def merkle_root(items: list[bytes]) -> bytes:
    """CometBFT's crypto/merkle HashFromByteSlices (RFC 6962: 0x00 leaves, 0x01 inner nodes,
    split at the largest power of two below n)."""
    n = len(items)
    if n == 0:
        return _sha(b"")
    if n == 1:
        return _sha(b"\x00" + items[0])
    k = 1
    while k * 2 < n:
        k *= 2
    return _sha(b"\x01" + merkle_root(items[:k]) + merkle_root(items[k:]))


def parse_time(text: str) -> tuple[int, int]:
    """RFC 3339 with up to nanoseconds ('2026-11-30T05:04:14.333627599Z') -> (seconds, nanos)."""

    date, _, rest = text.partition("T")
    clock = rest.rstrip("Z")
    hms, _, frac = clock.partition(".")
    y, mo, d = (int(x) for x in date.split("-"))
    h, mi, s = (int(x) for x in hms.split(":"))
    secs = calendar.timegm((y, mo, d, h, mi, s, 0, 0, 0))
    nanos = int((frac + "000000000")[:9]) if frac else 0
    return secs, nanos


def _hex(s: str | None) -> bytes:
    return bytes.fromhex(s or "")


def header_hash(h: dict[str, Any]) -> bytes:
    from tendermint.types import types_pb2  # lazy: needs abci_app.pb first
    from tendermint.version import types_pb2 as version_pb2  # lazy: needs abci_app.pb first

    version = version_pb2.Consensus(
        block=int(h["version"]["block"]), app=int(h["version"].get("app", 0))
    )
    secs, nanos = parse_time(h["time"])
    ts = timestamp_pb2.Timestamp(seconds=secs, nanos=nanos)
    lbi = h["last_block_id"]
    block_id = types_pb2.BlockID(
        hash=_hex(lbi["hash"]),
        part_set_header=types_pb2.PartSetHeader(
            total=int(lbi["parts"]["total"]), hash=_hex(lbi["parts"]["hash"])
        ),
    )

    def b(name: str) -> bytes:
        return wrappers_pb2.BytesValue(value=_hex(h[name])).SerializeToString()

    fields = [
        version.SerializeToString(),
        wrappers_pb2.StringValue(value=h["chain_id"]).SerializeToString(),
        wrappers_pb2.Int64Value(value=int(h["height"])).SerializeToString(),
        ts.SerializeToString(),
        block_id.SerializeToString(),
        b("last_commit_hash"),
        b("data_hash"),
        b("validators_hash"),
        b("next_validators_hash"),
        b("consensus_hash"),
        b("app_hash"),
        b("last_results_hash"),
        b("evidence_hash"),
        b("proposer_address"),
    ]
    return merkle_root(fields)


@dataclass(frozen=True, slots=True)
class Validator:
    address: bytes
    pub_key: bytes
    power: int


def validator_set_hash(vals: Iterable[Validator]) -> bytes:
    from tendermint.crypto import keys_pb2 as ckeys  # lazy: needs abci_app.pb first
    from tendermint.types import validator_pb2  # lazy: needs abci_app.pb first

    return merkle_root(
        [
            validator_pb2.SimpleValidator(
                pub_key=ckeys.PublicKey(ed25519=v.pub_key), voting_power=v.power
            ).SerializeToString()
            for v in vals
        ]
    )


def vote_sign_bytes(
    chain_id: str, height: int, round_: int, block_id: dict[str, Any], timestamp: str
) -> bytes:
    from tendermint.types import canonical_pb2  # lazy: needs abci_app.pb first

    secs, nanos = parse_time(timestamp)
    vote = canonical_pb2.CanonicalVote(
        type=2,  # SIGNED_MSG_TYPE_PRECOMMIT
        height=height,
        round=round_,
        block_id=canonical_pb2.CanonicalBlockID(
            hash=_hex(block_id["hash"]),
            part_set_header=canonical_pb2.CanonicalPartSetHeader(
                total=int(block_id["parts"]["total"]), hash=_hex(block_id["parts"]["hash"])
            ),
        ),
        timestamp=timestamp_pb2.Timestamp(seconds=secs, nanos=nanos),
        chain_id=chain_id,
    )
    data = vote.SerializeToString()
    return encode_uvarint(len(data)) + data


def verify_signed_header(signed_header: dict[str, Any], vals: list[Validator]) -> dict[str, Any]:
    """Checks 1-3 of the module docstring; returns the header. Raises HeaderInvalid."""
    h, commit = signed_header["header"], signed_header["commit"]
    if header_hash(h) != _hex(commit["block_id"]["hash"]):
        raise HeaderInvalid(f"header {h['height']} does not hash to the block id its commit signs")
    if validator_set_hash(vals) != _hex(h["validators_hash"]):
        raise HeaderInvalid(f"validator set does not match validators_hash of header {h['height']}")
    by_addr = {v.address: v for v in vals}
    total = sum(v.power for v in vals)
    signed = 0
    seen: set[bytes] = set()
    for sig in commit["signatures"]:
        if int(sig["block_id_flag"]) != 2:  # only COMMIT votes count for this block
            continue
        addr = _hex(sig["validator_address"])
        v = by_addr.get(addr)
        if v is None or addr in seen:
            continue
        msg = vote_sign_bytes(
            h["chain_id"],
            int(commit["height"]),
            int(commit["round"]),
            commit["block_id"],
            sig["timestamp"],
        )
        try:
            VerifyKey(v.pub_key).verify(msg, base64.b64decode(sig["signature"]))
        except (BadSignatureError, ValueError):
            raise HeaderInvalid(
                f"bad commit signature by {addr.hex().upper()} at height {h['height']}"
            ) from None
        seen.add(addr)
        signed += v.power
    if 3 * signed <= 2 * total:
        raise HeaderInvalid(
            f"commit for height {h['height']} has {signed}/{total} voting power: not more than 2/3"
        )
    return h


def fetch_validators(client: Client, height: int) -> list[Validator]:
    """The whole validator set of ``height``, page by page (one page of 100 left a larger set
    short, and its hash never matched the header's)."""
    out: list[Validator] = []
    page = 1
    while True:
        res = client.call("validators", height=str(height), page=str(page), per_page="100")
        out += [
            Validator(
                _hex(v["address"]), base64.b64decode(v["pub_key"]["value"]), int(v["voting_power"])
            )
            for v in res["validators"]
        ]
        if not res["validators"] or len(out) >= int(res.get("total", len(out))) or page >= 100:
            return out
        page += 1


def verified_app_hash(
    client: Client,
    height: int,
    trusted_vals: list[Validator] | None = None,
    chain_id: str | None = None,
    trust: HeaderTrust | None = None,
) -> bytes:
    """The app hash in header ``height``, after checking that header as above; ``chain_id``:
    the chain the caller means (its client config's), which the header must name: a node of
    another chain (a testnet's, or one it made up under another name) answers with its own
    validly signed headers. ``trust``: the validator set is not the node's word but trusted
    from genesis (``node.client.trust``: a forged chain under the right chain id is caught too)."""
    if trust is not None:
        if chain_id is not None and trust.chain_id != chain_id:
            raise HeaderInvalid(
                f"the genesis of --home is of chain {trust.chain_id!r}, not {chain_id!r}"
            )
        return _hex(trust.verified_header(client, height)["app_hash"])
    signed_header = client.call("commit", height=str(height))["signed_header"]
    named = signed_header["header"].get("chain_id")
    if chain_id is not None and named != chain_id:
        raise HeaderInvalid(
            f"header {height} is of chain {str(named)[:60]!r}, not {chain_id!r} (the chain-id of "
            "your client config: `loconet config chain-id`)"
        )
    got = (signed_header["header"]["height"], signed_header["commit"]["height"])
    if {int(x) for x in got} != {height}:
        # a real, validly signed header of another height would prove a value of another
        # state (an old balance shown as today's)
        raise HeaderInvalid(f"asked for header {height}, the node answered heights {got}")
    vals = trusted_vals if trusted_vals is not None else fetch_validators(client, height)
    return _hex(verify_signed_header(signed_header, vals)["app_hash"])
