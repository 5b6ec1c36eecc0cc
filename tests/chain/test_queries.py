"""abci_query: paths, past heights, pruned heights, proofs that verify against the app hash."""

from __future__ import annotations

import json

from abci_app.app import Application
from abci_app.codec.address import to_bech32
from abci_app.pb import abci
from abci_app.store import MerkleStore, Proof, verify_proof
from tests.kits.chainkit import Chain, genesis_request, send_msg, signer


def q(chain: Chain, path: str, height: int = 0, prove: bool = False) -> abci.ResponseQuery:
    return chain.app.query(abci.RequestQuery(path=path, height=height, prove=prove))


def test_account_at_past_heights(chain: Chain) -> None:
    k0, k1 = chain.keys[0], chain.keys[1]
    path = f"/account/{to_bech32(k1.address)}"
    start = json.loads(q(chain, path).value)["balance"]
    h0 = chain.store.height
    chain.block([chain.tx(k0, [send_msg(k1.address, 11)])])
    chain.block([chain.tx(k0, [send_msg(k1.address, 22)])])
    assert json.loads(q(chain, path, height=h0).value)["balance"] == start
    assert json.loads(q(chain, path, height=h0 + 1).value)["balance"] == start + 11
    assert json.loads(q(chain, path).value)["balance"] == start + 33
    r = q(chain, path, height=h0 + 1, prove=True)
    assert r.height == h0 + 1
    root = chain.store.root_at(h0 + 1)
    for op in r.proof_ops.ops:
        p = Proof.from_bytes(op.data)
        assert verify_proof(p, root, op.key, p.value)
        assert not verify_proof(p, chain.store.app_hash, op.key, p.value)  # not the latest root


def test_pruned_and_future_heights_give_clear_errors() -> None:
    k0, k1, val = signer(0), signer(1), signer(1000)
    app = Application(MerkleStore(None, keep_recent=2))
    app.init_chain(genesis_request({k0.address: 10**9}, [(val, 10)]))
    c = Chain(app, [k0, k1], [val])
    for _ in range(6):
        c.block([])
    path = f"/account/{to_bech32(k1.address)}"
    old = q(c, path, height=1)
    assert old.code == 2 and old.codespace == "query" and "height" in old.log
    future = q(c, path, height=c.store.height + 5)
    assert future.code == 2 and "height" in future.log


def test_unknown_path_and_bad_address(chain: Chain) -> None:
    r = q(chain, "/nope")
    assert r.code == 1 and "/account" in r.log  # lists the known paths
    r = q(chain, "/account/loco1notanaddress")
    assert r.code == 2 and "bech32" in r.log


def test_supply_query(chain: Chain) -> None:
    from abci_app.bank import keeper

    assert json.loads(q(chain, "/supply").value)["supply"] == keeper.get_supply(chain.store)


# ---- red-team regressions: hostile query arguments get a stable code and a readable log


def test_invalid_query_numbers_are_ascii_u64(chain: Chain) -> None:
    # Unicode digits used to pass str.isdigit(): /job/١ read job 1, /jobs?from=² leaked int()'s
    # error, and 5000 digits leaked "use sys.set_int_max_str_digits()" with code 2
    for path in (
        "/job/١",
        "/job/²",
        "/job/-1",
        "/job/+1",
        "/job/ 1",
        "/job/1e3",
        "/job/0x1",
        "/job/18446744073709551616",
        "/job/" + "9" * 5000,
        "/round/1/" + "9" * 5000,
        "/rounds/١",
        "/jobs?from=-1",
        "/jobs?from=²",
        "/jobs?limit=" + "9" * 5000,
        "/providers?from=1.5",
        "/providers?limit=" + "9" * 30,
    ):
        r = q(chain, path)
        assert (r.code, r.codespace) == (1, "query"), (path[:40], r.code, r.log)
        assert "unsigned integer" in r.log and "sys.set_int" not in r.log and len(r.log) < 200, (
            r.log
        )
    assert q(chain, "/jobs?from=18446744073709551615&limit=0").code == 0  # the largest u64 is fine


def test_invalid_query_negative_height(chain: Chain) -> None:
    for h in (-1, -(2**63)):
        r = q(chain, "/supply", height=h, prove=True)
        assert (r.code, r.codespace) == (2, "query") and "negative" in r.log and not r.proof_ops.ops


def test_invalid_query_future_height_before_arguments(chain: Chain) -> None:
    # the height is checked first: a future height is code 2 whatever the path's arguments
    r = q(chain, "/job/x", height=chain.store.height + 1)
    assert r.code == 2 and "height" in r.log


def test_invalid_signing_info_address_length(chain: Chain) -> None:
    for arg in ("ab", "00" * 19, "00" * 21, "zz"):
        r = q(chain, "/signing_info/" + arg)
        assert (r.code, r.codespace) == (1, "query"), (arg, r.log)
    assert q(chain, "/signing_info/" + "00" * 20).code == 0


def test_invalid_jobs_status(chain: Chain) -> None:
    r = q(chain, "/jobs?status=zzz")
    assert r.code == 1 and "active" in r.log  # names the statuses, no silent empty page
    assert q(chain, "/jobs?status=active").code == 0


def test_invalid_checkpoint_number(chain: Chain) -> None:
    # /checkpoint/2^64 used to raise OverflowError out of app.query (u64_key), /checkpoint/١ read 1
    for arg in ("18446744073709551616", "9" * 5000, "١", "1x"):
        r = q(chain, "/checkpoint/" + arg, prove=True)
        assert (r.code, r.codespace) == (1, "query"), (arg[:30], r.code, r.log)
        assert "sys.set_int" not in r.log
    assert q(chain, "/checkpoint/18446744073709551615").code == 1  # largest u64: simply not found


def test_invalid_query_parameters(chain: Chain) -> None:
    # unknown parameters were ignored (a typo ?ownr= answered with every job) and a repeated one
    # silently took its last value
    for path in (
        "/jobs?ownr=x",
        "/account/x?/evil",
        "/supply??",
        "/jobs?limit=1&limit=2",
        "/jobs?from=0&offset=1",
        "/providers?height=3",
    ):
        r = q(chain, path)
        assert (r.code, r.codespace) == (1, "query"), (path, r.code, r.log)
    assert q(chain, "/jobs?offset=0&limit=1").code == 0  # offset: another name for from
    assert q(chain, "/supply?").code == 0 and q(chain, "/providers?status=active&").code == 0


def test_a_parameter_the_path_does_not_take_is_refused(chain: Chain) -> None:
    # /supply?limit=5 and /providers?owner=... answered as if the parameter were not there: a
    # client that thought it filtered or paged got the whole answer without being told
    for path, name in (
        ("/supply?limit=5", "limit"),
        ("/providers?owner=loco1x", "owner"),
        ("/params?from=3", "from"),
        ("/rounds/1?status=active", None),  # job 1 does not exist: that error comes first
    ):
        r = q(chain, path)
        assert (r.code, r.codespace) == (1, "query"), (path, r.code, r.log)
        if name:
            assert f"'{name}' does not apply" in r.log, r.log
    assert q(chain, "/providers?status=active&limit=2&from=0").code == 0
    assert q(chain, "/jobs?owner=&status=").code == 0  # empty values are read, and apply
