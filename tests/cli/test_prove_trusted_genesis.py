"""``--prove`` with a node home trusts the validator set from its genesis (node/client/trust.py),
not from the node: a node that forges a whole chain with its own keys under the real chain id was
"proof_verified" (README, Known limits, before). Skipping verification as CometBFT's light
client does it: adjacent headers chain by ``next_validators_hash``, skips need >1/3 of the
trusted set's power, bisection in between, and never a skip past two thirds of the unbonding
period. Chains here are made up in process (their own keys, headers and commits)."""

from __future__ import annotations

import base64
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from nacl.signing import SigningKey

from abci_app.auth.keys import account_key
from abci_app.bank.keys import balance_key
from abci_app.codec.address import address_from_pubkey, to_bech32
from abci_app.encoding import encode_amount
from node.cli.main import main
from node.client import light
from node.client.light import HeaderInvalid
from node.client.rpc import Client
from node.client.trust import TRUST_FILE, TrustStore, genesis_validators
from tests.kits.fakenode import FakeChain, header_of, install

CHAIN = "loconet-main"
POWER_REDUCTION = 1_000_000


def keys(*seeds: int) -> list[SigningKey]:
    return [SigningKey(bytes([s]) * 32) for s in seeds]


def genesis(vals: list[SigningKey], power: int = 10, unbonding: int = 100) -> dict[str, Any]:
    """A genesis as `loconet init` writes it: each validator self-bonds power x 10^6 uloco."""
    ops = [address_from_pubkey(bytes(k.verify_key)) for k in vals]
    return {
        "chain_id": CHAIN,
        "initial_height": "1",
        "validators": [],
        "app_state": {
            "bank": {
                "balances": [
                    {"address": to_bech32(op), "amount": str(10 * power * POWER_REDUCTION)}
                    for op in ops
                ]
            },
            "slashing": {"params": {"max_evidence_age_blocks": str(min(unbonding, 100))}},
            "staking": {
                "params": {"unbonding_blocks": str(unbonding)},
                "validators": [
                    {
                        "pub_key": base64.b64encode(bytes(k.verify_key)).decode(),
                        "operator": to_bech32(op),
                        "moniker": f"v{i}",
                        "self_bond": str(power * POWER_REDUCTION),
                    }
                    for i, (k, op) in enumerate(zip(vals, ops, strict=True))
                ],
            },
        },
    }


def home_with(tmp_path: Path, g: dict[str, Any]) -> Path:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    (home / "config" / "genesis.json").write_text(json.dumps(g))
    return home


def _ts(h: int) -> str:
    return f"2026-01-01T00:{h // 60 % 60:02d}:{h % 60:02d}.000000001Z"


class LightChain:
    """Heights 1..tip; ``sets(h)``: the keys of height h's validator set (power 10 each);
    ``signers(h)``: who signs h's commit (default: all of ``sets(h)``)."""

    def __init__(
        self,
        sets: Callable[[int], list[SigningKey]],
        signers: Callable[[int], list[SigningKey]] | None = None,
        chain_id: str = CHAIN,
    ) -> None:
        self.sets, self.signers, self.chain_id = sets, signers or sets, chain_id
        self.calls: list[tuple[str, int]] = []

    def vals(self, h: int) -> list[light.Validator]:
        v = [
            light.Validator(address_from_pubkey(bytes(k.verify_key)), bytes(k.verify_key), 10)
            for k in self.sets(h)
        ]
        return sorted(v, key=lambda x: (-x.power, x.address))

    def header(self, h: int) -> dict[str, Any]:
        return header_of(
            self.chain_id,
            h,
            _ts(h),
            light.validator_set_hash(self.vals(h)),
            light.validator_set_hash(self.vals(h + 1)),
            bytes([h % 256]) * 32,
            self.vals(h)[0].address,
        )

    def commit(self, h: int) -> dict[str, Any]:
        hdr = self.header(h)
        bid = {
            "hash": light.header_hash(hdr).hex().upper(),
            "parts": {"total": 1, "hash": "00" * 32},
        }
        msg = light.vote_sign_bytes(self.chain_id, h, 0, bid, _ts(h))
        sigs = [
            {
                "block_id_flag": 2,
                "validator_address": address_from_pubkey(bytes(k.verify_key)).hex().upper(),
                "timestamp": _ts(h),
                "signature": base64.b64encode(k.sign(msg).signature).decode(),
            }
            for k in self.signers(h)
        ]
        return {
            "signed_header": {
                "header": hdr,
                "commit": {"height": str(h), "round": 0, "block_id": bid, "signatures": sigs},
            }
        }

    def client(self) -> Client:
        return Client("http://127.0.0.1:1", transport=self.transport())

    def transport(self) -> httpx.MockTransport:
        def handle(req: httpx.Request) -> httpx.Response:
            body = json.loads(req.content)
            m, p = body["method"], body["params"]
            h = int(p.get("height", 0))
            self.calls.append((m, h))
            if m == "commit":
                res: Any = self.commit(h)
            elif m == "validators":
                vs = self.vals(h)
                res = {
                    "validators": [
                        {
                            "address": v.address.hex().upper(),
                            "pub_key": {
                                "type": "tendermint/PubKeyEd25519",
                                "value": base64.b64encode(v.pub_key).decode(),
                            },
                            "voting_power": str(v.power),
                        }
                        for v in vs
                    ],
                    "total": str(len(vs)),
                }
            else:
                raise AssertionError(m)
            return httpx.Response(200, json={"jsonrpc": "2.0", "id": 1, "result": res})

        return httpx.MockTransport(handle)

    def commits_fetched(self) -> list[int]:
        return sorted({h for m, h in self.calls if m == "commit"})


V = keys(1, 2, 3, 4)


def test_the_genesis_set_is_the_apps_initchain_set_in_cometbfts_order() -> None:
    got = genesis_validators(genesis(V))
    want = sorted(
        (
            light.Validator(address_from_pubkey(bytes(k.verify_key)), bytes(k.verify_key), 10)
            for k in V
        ),
        key=lambda v: v.address,
    )
    assert got == want


def test_a_stable_set_is_trusted_with_a_few_skips(tmp_path: Path) -> None:
    chain = LightChain(lambda h: V)
    t = TrustStore(home_with(tmp_path, genesis(V)))
    assert t.verified_header(chain.client(), 50)["height"] == "50"
    assert chain.commits_fetched() == [50]  # one skip from genesis: >1/3 of V signed it
    saved = json.loads((tmp_path / "home" / "data" / TRUST_FILE).read_text())
    assert [x["height"] for x in saved["trusted"]] == [0, 50]


def test_skips_never_pass_two_thirds_of_the_unbonding_period(tmp_path: Path) -> None:
    chain = LightChain(lambda h: V)
    t = TrustStore(home_with(tmp_path, genesis(V, unbonding=30)))  # period 20
    t.verified_header(chain.client(), 70)
    assert chain.commits_fetched() == [20, 40, 60, 70]


def test_a_rotating_set_is_followed_by_bisection(tmp_path: Path) -> None:
    """One validator replaced every 10 heights, then the whole set by height 40: a direct skip
    from genesis to 60 has no overlap; bisection finds headers each trusted by the last."""
    pool = keys(*range(1, 12))

    def sets(h: int) -> list[SigningKey]:
        k = min(h // 10, 7)
        return pool[k : k + 4]

    chain = LightChain(sets)
    t = TrustStore(home_with(tmp_path, genesis(pool[:4])))
    t.verified_header(chain.client(), 60)
    got = chain.commits_fetched()
    assert got[-1] == 60 and 2 < len(got) < 20
    # and later heights start from the newest trusted one below them
    chain.calls.clear()
    t.verified_header(chain.client(), 65)
    assert chain.commits_fetched() == [65]


def test_a_chain_forged_with_other_keys_under_the_real_chain_id_is_refused(
    tmp_path: Path,
) -> None:
    forged = LightChain(lambda h: keys(9, 10, 11, 12))
    t = TrustStore(home_with(tmp_path, genesis(V)))
    with pytest.raises(HeaderInvalid, match="not signed by the validator set"):
        t.verified_header(forged.client(), 30)
    saved = json.loads((tmp_path / "home" / "data" / TRUST_FILE).read_text())
    assert [x["height"] for x in saved["trusted"]] == [0]  # nothing of the forgery kept


def test_a_third_of_the_trusted_set_is_not_enough(tmp_path: Path) -> None:
    """The attacker holds one genesis key of four (exactly 1/4 < 1/3) plus keys of its own:
    no skip from genesis, and header 1 is not signed by the genesis set."""
    forged = LightChain(lambda h: [V[0], *keys(9, 10, 11)])
    t = TrustStore(home_with(tmp_path, genesis(V)))
    with pytest.raises(HeaderInvalid):
        t.verified_header(forged.client(), 30)


def test_a_fork_of_a_trusted_height_is_refused(tmp_path: Path) -> None:
    home = home_with(tmp_path, genesis(V))
    TrustStore(home).verified_header(LightChain(lambda h: V).client(), 40)
    # the same set, another header at 40 (another chain id would be caught earlier: same one,
    # other app hashes)
    other = LightChain(lambda h: V)
    other.header = (lambda f: lambda h: {**f(h), "app_hash": "EE" * 32})(other.header)  # type: ignore[method-assign]
    with pytest.raises(HeaderInvalid, match="a fork"):
        TrustStore(home).verified_header(other.client(), 40)


def test_a_damaged_trust_file_is_rebuilt_from_genesis(tmp_path: Path) -> None:
    home = home_with(tmp_path, genesis(V))
    (home / "data").mkdir()
    (home / "data" / TRUST_FILE).write_text('{"genesis_sha256": "x", "trus')
    assert TrustStore(home).verified_header(LightChain(lambda h: V).client(), 5)["height"] == "5"


def test_cli_prove_refuses_the_forged_chain_and_accepts_the_true_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """End to end through `loconet query account --prove --home`: FakeChain signs with its own
    key (b"\\x07" * 32). A home whose genesis names other validators refuses it; a home whose
    genesis names that key accepts, and says the set came from genesis."""
    victim = bytes(range(20))
    chain = FakeChain({balance_key(victim): encode_amount(10**15)}, chain_id=CHAIN)
    addr = to_bech32(victim)
    chain.answers[f"/account/{addr}"] = (
        json.dumps({"address": addr, "balance": 10**15, "sequence": 0}).encode(),
        [balance_key(victim), account_key(victim)],
    )
    install(monkeypatch, chain)
    argv = ["query", "account", addr, "--prove", "--node", "http://127.0.0.1:1", "-o", "json"]

    rc = main([*argv, "--home", str(home_with(tmp_path / "a", genesis(V)))])
    out = capsys.readouterr()
    said = out.out + out.err
    assert rc == 1 and "not signed by the validator set" in said and "proof_verified" not in said

    rc = main([*argv, "--home", str(home_with(tmp_path / "b", genesis(keys(7))))])
    out = capsys.readouterr()
    assert rc == 0, out.err
    res = json.loads(out.out)
    assert res["proof_verified"] is True and res["validator_set"] == "genesis"
    # in words too, and without a node home it says what it could not check
    assert main([*argv[:-2], "--home", str(tmp_path / "b" / "home")]) == 0
    assert "signers:  trusted from --home's genesis" in capsys.readouterr().out
    assert main(argv[:-2]) == 0
    assert "give a node home as --home" in capsys.readouterr().out


def test_a_walk_that_gives_up_keeps_what_it_verified_and_counts_only_fetches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Review findings: the step limit counted loop turns that fetched nothing (half the stated
    headers), and a walk that gave up threw away every header it had verified, so each retry
    failed the same way. Now: 12 fetches allowed past the asked header, 19 needed (period 20 to
    height 400): the first try stops with what it verified saved (20..240), the second goes on
    from there and succeeds."""
    import node.client.trust as trust

    monkeypatch.setattr(trust, "MAX_STEPS", 12)
    chain = LightChain(lambda h: V)
    home = home_with(tmp_path, genesis(V, unbonding=30))
    with pytest.raises(HeaderInvalid, match="run the command again"):
        TrustStore(home).verified_header(chain.client(), 400)
    saved = json.loads((home / "data" / TRUST_FILE).read_text())
    assert [x["height"] for x in saved["trusted"]] == [0, *range(20, 20 * 13, 20)]
    assert TrustStore(home).verified_header(chain.client(), 400)["height"] == "400"


@pytest.mark.parametrize(
    "content",
    ["[]", '{"genesis_sha256": 1}', "[" * 5000 + "]" * 5000, '{"trusted": [{"height": Infinity}]}'],
)
def test_any_damaged_trust_file_is_rebuilt_from_genesis(tmp_path: Path, content: str) -> None:
    home = home_with(tmp_path, genesis(V))
    (home / "data").mkdir()
    (home / "data" / TRUST_FILE).write_text(content)
    assert TrustStore(home).verified_header(LightChain(lambda h: V).client(), 5)["height"] == "5"


def test_a_node_sending_infinity_is_a_clean_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A lying node's ``"height": Infinity`` (json.loads accepts it) made int() raise
    OverflowError: a traceback. NaN and Infinity are not JSON; node answers refuse them."""
    victim = bytes(range(20))
    chain = FakeChain({balance_key(victim): encode_amount(1)}, chain_id=CHAIN)
    addr = to_bech32(victim)
    chain.answers[f"/account/{addr}"] = (
        json.dumps({"address": addr, "balance": 1, "sequence": 0}).encode(),
        [balance_key(victim), account_key(victim)],
    )
    real_commit = chain.commit

    def commit(h: int) -> dict[str, Any]:
        c = real_commit(h)
        c["signed_header"]["header"]["height"] = float("inf")  # json.dumps writes Infinity
        return c

    chain.commit = commit  # type: ignore[method-assign]

    def transport() -> httpx.MockTransport:  # raw bytes: httpx's json= refuses Infinity
        def handle(req: httpx.Request) -> httpx.Response:
            body = json.loads(req.content)
            res = chain.rpc(body["method"], body["params"])
            return httpx.Response(
                200, content=json.dumps({"jsonrpc": "2.0", "id": 1, "result": res})
            )

        return httpx.MockTransport(handle)

    chain.transport = transport  # type: ignore[method-assign]
    install(monkeypatch, chain)
    argv = ["query", "account", addr, "--prove", "--node", "http://127.0.0.1:1"]
    for extra in ([], ["--home", str(home_with(tmp_path, genesis(keys(7))))]):
        rc = main([*argv, *extra])
        out = capsys.readouterr()
        assert rc == 1 and "Traceback" not in out.err and out.err.startswith("error:"), out.err


def test_a_genesis_with_infinity_is_a_clean_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "config").mkdir(parents=True)
    text = json.dumps(genesis(V)).replace(
        '"unbonding_blocks": "100"', '"unbonding_blocks": Infinity'
    )
    (home / "config" / "genesis.json").write_text(text)
    from node.client.trust import trust_store

    with pytest.raises(HeaderInvalid, match="cannot read"):
        trust_store(home)


def test_the_explorer_with_a_home_refuses_the_forged_chain(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`loconet explorer --home`: the page's header check trusts the genesis too (FakeChain signs
    with its own key; the home's genesis names V): an *untrusted* banner, not a page."""
    from node.explorer.data import Collector, Untrusted

    install(monkeypatch, FakeChain({b"\x01k": b"v"}, chain_id=CHAIN))
    c = Collector("http://127.0.0.1:1", trust=TrustStore(home_with(tmp_path, genesis(V))))
    with pytest.raises(Untrusted, match="not signed by the validator set"):
        c.snapshot()


def test_a_pinned_header_is_where_later_checks_start(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`loconet trust HEIGHT HASH`: for a chain far past its first unbonding period. With one
    fetch allowed, height 5,010 cannot be reached from genesis (period 66), and can from a
    header pinned at 5,000. A wrong hash, or a second header at a trusted height, is refused."""
    import node.client.trust as trust
    from node.client import rpc

    chain = LightChain(lambda h: V)
    home = home_with(tmp_path, genesis(V))
    monkeypatch.setattr(trust, "MAX_STEPS", 1)
    with pytest.raises(HeaderInvalid, match="run the command again"):
        TrustStore(home).verified_header(chain.client(), 5010)

    orig = rpc.Client.__init__
    monkeypatch.setattr(
        rpc.Client,
        "__init__",
        lambda self, url=rpc.DEFAULT_NODE, timeout=10.0, transport=None: orig(
            self, url, timeout, chain.transport()
        ),
    )
    good = light.header_hash(chain.header(5000)).hex().upper()
    argv = ["trust", "5000", "--home", str(home), "--node", "http://127.0.0.1:1", "-o", "json"]
    assert main([*argv[:2], "AB" * 32, *argv[2:]]) == 1
    assert "not " + "AB" * 32 in capsys.readouterr().out
    assert main([*argv[:2], good, *argv[2:]]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["height"], res["hash"], res["validators"]) == (5000, good, 4)

    chain.calls.clear()
    assert TrustStore(home).verified_header(chain.client(), 5010)["height"] == "5010"
    assert chain.commits_fetched() == [5010]

    monkeypatch.undo()  # the next client talks to another chain
    other = LightChain(lambda h: V)
    other.header = (lambda f: lambda h: {**f(h), "app_hash": "EE" * 32})(other.header)  # type: ignore[method-assign]
    with pytest.raises(HeaderInvalid, match="already trusted"):
        TrustStore(home).pin(other.client(), 5000, light.header_hash(other.header(5000)))


@pytest.mark.parametrize(
    "args, says",
    [
        (["5", "zz"], "64 hex characters"),
        (["5", "AB" * 31], "64 hex characters"),
        (["0", "AB" * 32], "HEIGHT"),
    ],
)
def test_trust_arguments_are_checked_before_any_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], says: str
) -> None:
    home = home_with(tmp_path, genesis(V))
    rc = main(["trust", *args, "--home", str(home), "--node", "http://127.0.0.1:1"])
    err = capsys.readouterr().err
    assert rc != 0 and says in err and "Traceback" not in err


def test_trust_needs_a_node_home(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc = main(["trust", "5", "AB" * 32, "--home", str(tmp_path), "--node", "http://127.0.0.1:1"])
    assert rc == 1 and "genesis.json" in capsys.readouterr().err
