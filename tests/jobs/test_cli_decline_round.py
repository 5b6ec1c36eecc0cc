"""`loconet tx round decline` on a real cometbft node: a drawn provider refuses a round before
committing; the chain records outcome ``declined`` with no slash and no reputation change, and
a second decline is refused with the stable code (jobs/532) without touching state. Offline
(--generate-only) the command builds exactly one MsgDeclineRound."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from abci_app.jobs.errors import ErrCannotDecline
from tests.kits.clikit import flags, offline, run
from tests.kits.nodekit import Node, cli


def test_decline_builds_one_decline_message_offline(tmp_path: Path) -> None:
    home = tmp_path / "home"
    r = run("init", "--home", str(home), "--chain-id", "c")
    assert r.returncode == 0, r.stderr
    r = run(*offline(home, "tx", "round", "decline", "7", "3", "--from", "validator"))
    assert r.returncode == 0, r.stderr
    msgs = json.loads(r.stdout)["messages"]
    assert msgs == [{"decline_round": {"job_id": 7, "round": 3}}]


def test_decline_help_names_the_window_and_an_example(tmp_path: Path) -> None:
    r = run("tx", "round", "decline", "--help")
    assert r.returncode == 0, r.stderr
    text = " ".join(r.stdout.split())
    assert "commit_deadline - 1" in text and "no slash" in text
    assert "loconet tx round decline 1 0 --from alice" in text


@pytest.mark.integration
@pytest.mark.timeout(240)
def test_a_drawn_provider_declines_through_the_cli_unslashed(tmp_path: Path) -> None:
    node = Node(tmp_path / "node")
    node.init()
    home = str(node.home)
    node.start()
    try:
        node.wait_height(2)
        common = ["--home", home, "--node", node.url]

        def q(*args: str) -> dict:
            return json.loads(cli("query", *args, "--node", node.url, "-o", "json").stdout)

        # three providers, two drawn (the draw leaves one outside the round to verify it): the
        # other drawn one stays silent, so the commit phase still waits for it after the first's
        # decline (a phase whose messages are all in ends early: the second decline would meet the
        # reveal phase, not the decline rule)
        addr = {}
        for name, port in (("alice", 26681), ("bob", 26682), ("carol", 26683)):
            out = cli("keys", "add", name, "--home", home, "-o", "json").stdout
            addr[name] = json.loads(out)["address"]
            cli("tx", "bank", "send", addr[name], "5000loco", "--from", "validator", *common)
            cli(
                *("tx", "provider", "register", "--from", name),
                *flags(bond="2000loco", endpoint=f"http://127.0.0.1:{port}"),
                *flags(gpu="H100:8:81920", throughput=50000, region="eu-west"),
                *common,
            )
        before_all = {a: q("provider", a)["result"] for a in addr.values()}
        cli(
            *("tx", "job", "create", "--from", "validator"),
            *flags(rounds=1, reward_per_round="10loco", verifier_reward="1loco"),
            *flags(initial_model="00" * 32, dataset_id="11" * 32, inner_steps=8),
            *flags(trace_interval=2, participants=2, shards=2, tokens_per_step=1024),
            *flags(windows="40,10,10,10", challenge_bps=10000, verifiers=1, segments=2),
            *common,
        )
        deadline = time.monotonic() + 90
        while True:
            res = cli("query", "round", "1", "0", "--node", node.url, "-o", "json", check=False)
            if res.returncode == 0:
                r = json.loads(res.stdout)["result"]
                if r["phase"] == "commit":
                    break
            assert time.monotonic() < deadline, "round 1/0 never reached its commit window"
            time.sleep(0.3)
        drawn = sorted(p["address"] for p in r["participants"])
        assert len(drawn) == 2 and set(drawn) <= set(addr.values())
        alice = drawn[0]
        name = next(n for n, a in addr.items() if a == alice)
        before = before_all[alice]

        res = cli("tx", "round", "decline", "1", "0", "--from", name, *common, "-o", "json")
        assert json.loads(res.stdout)["code"] == 0, res.stdout
        r = q("round", "1", "0")["result"]
        assert r["phase"] == "commit"
        (me,) = [p for p in r["participants"] if p["address"] == alice]
        assert me["outcome"] == "declined" and me["slashed"] == 0, me

        again = cli("tx", "round", "decline", "1", "0", "--from", name, *common, check=False)
        code = f"{ErrCannotDecline.codespace}/{ErrCannotDecline.code}"
        assert again.returncode != 0 and code in again.stdout + again.stderr, again
        # the declined seat is untouched (the others' may move on meanwhile: the commit window
        # can close on a busy machine between the two declines)
        (still,) = [
            p for p in q("round", "1", "0")["result"]["participants"] if p["address"] == alice
        ]
        assert still == me, still

        after = q("provider", alice)["result"]
        assert after["bond"] == before["bond"] == 2_000_000_000
        assert after["reputation"] == before["reputation"]
        assert after.get("slashed_total", 0) == 0
    finally:
        node.stop()
