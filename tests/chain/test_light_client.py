"""Header checks for --prove against a signed header recorded from a real cometbft v0.38.25
node (tests/chain/data): header hash, validator-set hash, +2/3 commit signatures; and every
tampering is caught."""

from __future__ import annotations

import base64
import copy
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from node.client.light import (
    HeaderInvalid,
    Validator,
    header_hash,
    merkle_root,
    parse_time,
    validator_set_hash,
    verify_signed_header,
)

DATA = json.loads((Path(__file__).parent / "data" / "signed_header_h3.json").read_text())


def vals() -> list[Validator]:
    return [
        Validator(
            bytes.fromhex(v["address"]),
            base64.b64decode(v["pub_key"]["value"]),
            int(v["voting_power"]),
        )
        for v in DATA["validators"]["validators"]
    ]


def sh() -> dict:
    return copy.deepcopy(DATA["commit"]["signed_header"])


def test_merkle_root_matches_cometbft_rules() -> None:
    s = lambda b: hashlib.sha256(b).digest()  # noqa: E731
    assert merkle_root([]) == s(b"")
    assert merkle_root([b"a"]) == s(b"\x00a")
    two = s(b"\x01" + s(b"\x00a") + s(b"\x00b"))
    assert merkle_root([b"a", b"b"]) == two
    # 3 leaves split 2 + 1 (largest power of two below n)
    assert merkle_root([b"a", b"b", b"c"]) == s(b"\x01" + two + s(b"\x00c"))


def test_parse_time_keeps_nanoseconds() -> None:
    assert parse_time("1970-01-01T00:00:01.000000007Z") == (1, 7)
    assert parse_time("2026-11-30T05:04:14Z")[1] == 0


def test_recorded_header_verifies() -> None:
    h = sh()
    assert header_hash(h["header"]).hex().upper() == h["commit"]["block_id"]["hash"]
    assert validator_set_hash(vals()).hex().upper() == h["header"]["validators_hash"]
    assert verify_signed_header(h, vals())["app_hash"] == h["header"]["app_hash"]


@pytest.mark.parametrize("field", ["app_hash", "validators_hash", "proposer_address", "data_hash"])
def test_invalid_tampered_header_field(field: str) -> None:
    h = sh()
    v = bytearray(bytes.fromhex(h["header"][field]))
    v[0] ^= 1
    h["header"][field] = v.hex().upper()
    with pytest.raises(HeaderInvalid, match="does not hash to the block id"):
        verify_signed_header(h, vals())


def test_invalid_tampered_height_or_time() -> None:
    for key, val in (
        ("height", "4"),
        ("time", "2026-11-30T05:04:14.333627598Z"),
        ("chain_id", "other"),
    ):
        h = sh()
        h["header"][key] = val
        with pytest.raises(HeaderInvalid):
            verify_signed_header(h, vals())


def test_invalid_signature() -> None:
    h = sh()
    sig = bytearray(base64.b64decode(h["commit"]["signatures"][0]["signature"]))
    sig[5] ^= 1
    h["commit"]["signatures"][0]["signature"] = base64.b64encode(bytes(sig)).decode()
    with pytest.raises(HeaderInvalid, match="bad commit signature"):
        verify_signed_header(h, vals())


def test_invalid_other_validator_set() -> None:
    other = [Validator(v.address, v.pub_key, v.power + 1) for v in vals()]
    with pytest.raises(HeaderInvalid, match="validators_hash"):
        verify_signed_header(sh(), other)


def test_invalid_not_enough_power() -> None:
    h = sh()
    for s in h["commit"]["signatures"]:
        s["block_id_flag"] = 1  # absent
    with pytest.raises(HeaderInvalid, match="not more than 2/3"):
        verify_signed_header(h, vals())


class _Recorded:
    """A node answering /commit with the recorded header 3 whatever height is asked, and
    /validators page by page (``per_page`` honoured, as CometBFT does)."""

    def __init__(self, validators: list[dict] | None = None) -> None:
        self.validators = validators or DATA["validators"]["validators"]
        self.pages: list[str] = []

    def call(self, method: str, **params: str) -> dict:
        if method == "commit":
            return {"signed_header": sh()}
        page, per = int(params.get("page", "1")), int(params["per_page"])
        self.pages.append(params.get("page", "1"))
        chunk = self.validators[(page - 1) * per : page * per]
        return {"validators": chunk, "total": str(len(self.validators))}


def test_invalid_header_of_another_height_is_refused() -> None:
    """A node asked for header H answered with a real, validly signed header of another height:
    its app hash proved a value of another state, shown as height H's (red-team regression)."""
    from node.client.light import verified_app_hash

    node: Any = _Recorded()
    assert verified_app_hash(node, 3).hex().upper() == sh()["header"]["app_hash"]
    with pytest.raises(HeaderInvalid, match="asked for header 5"):
        verified_app_hash(node, 5)


def test_invalid_query_answer_for_another_height_is_refused() -> None:
    """`query account --height 5 --prove`: a node answering with height 7's state and its
    (valid) proof was shown as height 5's."""
    from node.client.proofs import ProofInvalid, verify_query
    from node.client.rpc import QueryResult

    qr = QueryResult(code=0, log="", height=7, value=b"{}", proof_ops=[])
    with pytest.raises(ProofInvalid, match="asked for height 5, the node answered for height 7"):
        verify_query(_Recorded(), qr, asked=5)  # type: ignore[arg-type]


def test_validator_sets_past_one_page_are_fetched_whole() -> None:
    """/validators returns 100 per page: a set of 250 was read as its first 100 (its hash never
    matched the header, so --prove failed on any chain with more than 100 validators)."""
    from node.client.light import fetch_validators

    one = DATA["validators"]["validators"][0]
    many = [dict(one, address=f"{i:040X}") for i in range(250)]
    node: Any = _Recorded(many)
    got = fetch_validators(node, 3)
    assert [v.address.hex().upper() for v in got] == [v["address"] for v in many]
    assert node.pages == ["1", "2", "3"]
