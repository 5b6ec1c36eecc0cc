"""What the explorer's search box names and how it shows event attributes (issue 36), as pure
functions over the chain's JSON (node/explorer/views.py); the browser tests check the pages."""

from __future__ import annotations

from node.explorer import views

ADDR = "loco1vghnq9cs8zrcg88l724uzc6u3gx8e362qegzak"
MODEL = "ab" * 32


def jobs() -> list[dict]:
    return [
        {
            "id": 3,
            "created_height": 5,
            "spec": {"initial_model_hash": "cd" * 32},
            "round_records": [
                {
                    "round": 0,
                    "attested_model_hash": MODEL,
                    "base_model_hash": "cd" * 32,
                    "attest_stake": 1,
                    "finalized_height": 20,
                }
            ],
        }
    ]


def test_search_names_each_kind() -> None:
    t = views.search_targets
    assert t("17", jobs(), []) == [{"what": "block 17", "href": "/block/17"}]
    assert [x["href"] for x in t("3", jobs(), [])] == ["/job/3", "/block/3"]  # both
    assert t("job 3", jobs(), []) == [{"what": "job 3", "href": "/job/3"}]
    assert t("#3", jobs(), []) == [{"what": "job 3", "href": "/job/3"}]
    assert t("job 4", jobs(), []) == []
    assert t(ADDR, jobs(), []) == [{"what": f"account {ADDR}", "href": f"/account/{ADDR}"}]
    assert t("loco1notanaddress", jobs(), []) == []
    hrefs = [x["href"] for x in t(MODEL.upper(), jobs(), [])]
    assert hrefs == ["/job/3#round-0", f"/tx/{MODEL.upper()}"]  # a model, else a tx hash
    assert [x["href"] for x in t("0x" + "ef" * 32, jobs(), [])] == [f"/tx/{'EF' * 32}"]
    assert t("12" * 20, jobs(), [])[0]["href"] == f"/validator/{'12' * 20}"
    assert t("<script>", jobs(), []) == [] and t("", jobs(), []) == []


def test_event_attributes_decoded() -> None:
    a = {"job_id": "3", "round": "0", "recipient": ADDR, "amount": "5000000", "payout": "x"}
    amount = views.attr_view("amount", "5000000", a)
    assert amount["text"] == "5 LOCO" and amount["title"] == "5,000,000 uloco"
    assert views.attr_view("recipient", ADDR, a)["href"] == f"/account/{ADDR}"
    assert views.attr_view("job_id", "3", a)["href"] == "/job/3"
    assert views.attr_view("round", "0", a)["href"] == "/job/3#round-0"
    assert views.attr_view("height", "12", a)["href"] == "/block/12"
    h = views.attr_view("model", MODEL, a)
    assert h["title"] == MODEL and h["text"].endswith("…") and not h["href"]
    assert views.attr_view("payout", "x", a) == {
        "text": "x",
        "href": "",
        "title": "",
        "kind": "text",
    }


def test_validators_of_a_multi_validator_chain_are_proven_and_a_lie_refused() -> None:
    """/validators' proof covers every listed validator's key: each one is read from it (a
    single-key check once marked every network of 2+ validators untrusted)."""
    import pytest

    from node.explorer.data import Untrusted
    from tests.explorer.test_explorer_pages import _collector
    from tests.kits.chainkit import new_chain

    c = new_chain(n_validators=3)
    c.block([])
    c.block([])
    m = type("M", (), {"chain": c})()
    h = c.store.height
    root = c.store.root_at(h)
    vals = _collector(m)._validators(h, root, {})
    assert len(vals) == 3 and all(v["tokens"] > 0 and v["moniker"] is not None for v in vals)

    def richer(path: str, d: object) -> object:
        if path == "/validators" and isinstance(d, list):
            d[1]["tokens"] += 1
        return d

    with pytest.raises(Untrusted, match="disagrees with its own proof"):
        _collector(m, richer)._validators(h, root, {})
