"""One round of a real job on a real cometbft node, every tx sent through the `loconet` CLI:
register two providers, create a job, submit, reveal (Merkle proofs checked on chain), verdicts,
attest; then `query round --prove` verifies the finalized round against the header's app hash."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path

import pytest

from abci_app.jobs.errors import ErrUnboundCommitment  # noqa: E402
from tests.kits.clikit import flags  # noqa: E402
from tests.kits.nodekit import LOCONET, ROOT, Node, cli  # noqa: E402

# commit, reveal, verdict, attest (blocks of ~0.5-1 s; the commit window holds
WINDOWS = (
    24,
    10,
    10,
    10,
)
# two CLI submissions that each start Python and wait for a block, even on a loaded machine)


def h(s: str) -> str:
    return hashlib.sha256(s.encode()).hexdigest()


def parallel(*cmds: list[str]) -> None:
    procs = [
        subprocess.Popen(
            [*LOCONET, *c], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        for c in cmds
    ]
    for c, p in zip(cmds, procs, strict=True):
        o, e = p.communicate(timeout=90)
        assert p.returncode == 0, f"loconet {' '.join(c)} failed:\n{o}\n{e}"


# long: one market round through the CLI on one live node, step by step; splitting hides the order
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_one_round_through_the_cli_on_cometbft(tmp_path: Path) -> None:
    node = Node(tmp_path / "node")
    node.init()
    home = str(node.home)
    node.start()
    try:
        node.wait_height(2)
        common = ["--home", home, "--node", node.url]
        # a job id the chain does not have names the command that lists the ones it has
        missing = cli("query", "job", "99", "--node", node.url, check=False)
        assert missing.returncode == 1, missing
        assert "job 99 not found; list the jobs there are with `loconet query jobs`" in (
            missing.stderr
        ), missing.stderr

        def q(*args: str) -> dict:
            return json.loads(cli("query", *args, "--node", node.url, "-o", "json").stdout)

        def wait_phase(phase: str, timeout: float = 90) -> dict:
            deadline = time.monotonic() + timeout
            while True:
                out = cli("query", "round", "1", "0", "--node", node.url, "-o", "json", check=False)
                if out.returncode != 0:  # the round opens in a block after the job's: not there yet
                    # with -o json the error is JSON on stdout
                    assert "not found" in out.stdout + out.stderr, out
                    assert time.monotonic() < deadline, "round 1/0 never opened"
                    time.sleep(0.3)
                    continue
                r = json.loads(out.stdout)["result"]
                if r["phase"] == phase:
                    return r
                assert time.monotonic() < deadline, (
                    f"round stuck in {r['phase']}, waiting for {phase}"
                )
                time.sleep(0.3)

        addrs = {}
        for name in ("alice", "bob"):
            addrs[name] = json.loads(cli("keys", "add", name, "--home", home, "-o", "json").stdout)[
                "address"
            ]
        for name in ("alice", "bob"):
            cli("tx", "bank", "send", addrs[name], "5000loco", "--from", "validator", *common)
        hw = flags(gpu="H100:8:81920", throughput=50000, region="eu-west")

        def register(who: str, bond: str, endpoint: str) -> list[str]:
            return [
                "tx",
                "provider",
                "register",
                "--from",
                who,
                *flags(bond=bond, endpoint=endpoint),
                *hw,
            ]

        parallel(
            *[
                [*register(n, "2000loco", f"http://127.0.0.1:2668{i}"), *common]
                for i, n in enumerate(("alice", "bob"))
            ]
        )
        # carol bonds less than the job's min_stake: never a participant, she is the verifier (a
        # round's participants never judge each other)
        carol = json.loads(cli("keys", "add", "carol", "--home", home, "-o", "json").stdout)[
            "address"
        ]
        cli("tx", "bank", "send", carol, "5000loco", "--from", "validator", *common)
        cli(*register("carol", "1000loco", "http://127.0.0.1:26689"), *common)
        prov = q("provider", addrs["alice"], "--prove")
        assert prov["proof_verified"] and prov["result"]["bond"] == 2_000_000_000

        model0, data = h("model0"), h("dataset")
        cli(
            *("tx", "job", "create", "--from", "validator"),
            *flags(rounds=1, reward_per_round="10loco", verifier_reward="1loco"),
            *flags(initial_model=model0, dataset_id=data, inner_steps=8, trace_interval=2),
            *flags(participants=2, shards=4, tokens_per_step=1024),
            *flags(windows=",".join(map(str, WINDOWS)), challenge_bps=10000, verifiers=1),
            *flags(segments=2, min_stake="2000loco"),
            # exact mode: the verifier's evidence is the end states themselves (here read from the
            # trace); a tolerance-mode job adds probes (MsgOpenEnd), which the workers run
            # (tests/testnet/test_testnet_tolerance.py)
            *flags(determinism="exact", stack="torch=2.4.1;device=cpu;dtype=float32;tf32=off"),
            *common,
        )
        r = wait_phase("commit")
        assert sorted(p["address"] for p in r["participants"]) == sorted(addrs.values())

        traces, payloads = {}, {}
        for n, a in addrs.items():
            states = [h(f"{a}/state/{i}") for i in range(5)]
            traces[n] = tmp_path / f"trace-{n}.json"
            traces[n].write_text(json.dumps(states))
            payloads[n] = tmp_path / f"update-{n}.bin"
            payloads[n].write_bytes(hashlib.sha256(n.encode()).digest() * 3858)  # 123,456 bytes
        # roots are bound to the signer: alice lets the CLI compute the update root and its
        # leaf-0 proof from the payload; bob takes the expert path (root and proof given)
        from abci_app.codec.address import from_bech32
        from abci_app.merkle import binding_leaf, chunk_bytes, merkle_proof, merkle_root

        bob_leaves = [
            binding_leaf(b"update", from_bech32(addrs["bob"]), 1, 0, bytes.fromhex(model0))
        ]
        bob_leaves += chunk_bytes(payloads["bob"].read_bytes())
        bob_proof = ",".join(x.hex() for x in merkle_proof(bob_leaves, 0))
        bob_root = merkle_root(bob_leaves).hex()
        update_args = {
            "alice": ["--payload-file", str(payloads["alice"])],
            "bob": flags(update_root=bob_root, update_proof=bob_proof, payload_size=123456),
        }
        # a copy of alice's roots signed by bob is refused (ErrUnboundCommitment) before either has
        # committed
        alice_root = merkle_root(
            [binding_leaf(b"update", from_bech32(addrs["alice"]), 1, 0, bytes.fromhex(model0))]
            + chunk_bytes(payloads["alice"].read_bytes())
        )
        # what a submission claims besides its roots (the same for both: only the roots differ)
        claims = flags(tokens=8192, loss_before=5500, loss_after=5200)

        def submit(who: str, roots: list[str], blob: str) -> list[str]:
            return [
                *("tx", "round", "submit-update", "1", "0", "--from", who, "--base-model", model0),
                *roots,
                *flags(trace_file=traces[who], blob=f"http://127.0.0.1:26680/blob/{blob}"),
                *claims,
                *common,
            ]

        roots = flags(update_root=alice_root.hex(), update_proof=bob_proof, payload_size=123456)
        bad = cli(*submit("bob", roots, "x"), check=False)
        unbound = f"{ErrUnboundCommitment.codespace}/{ErrUnboundCommitment.code}"
        assert bad.returncode != 0 and unbound in bad.stderr + bad.stdout, bad.stderr + bad.stdout
        parallel(*[submit(n, update_args[n], h(n)) for n in addrs])

        r = wait_phase("reveal")
        seg = {
            p["address"]: ",".join(map(str, p["challenge"]["segments"])) for p in r["participants"]
        }
        # the ends are opened by their leaf hashes only (both modes): no end location
        locations = flags(start_location="http://127.0.0.1:26680/s")
        parallel(
            *[
                ["tx", "round", "reveal", "1", "0", "--from", n, "--segment", seg[a], *locations]
                + [*flags(trace_file=traces[n]), *common]
                for n, a in addrs.items()
            ]
        )

        # secret votes: carol re-executes each segment (here: reads the end states from the trace),
        # commits the hash of her vote in the verdict window and opens it in the next one
        r = wait_phase("verdict")
        by_addr = {a: n for n, a in addrs.items()}
        votes = []
        for p in r["participants"]:
            assert [v["address"] for v in p["challenge"]["verifiers"]] == [carol]
            trace = json.loads(traces[by_addr[p["address"]]].read_text())
            # what re-executing each yields
            ends = ",".join(trace[sg + 1] for sg in p["challenge"]["segments"])
            vote = flags(valid=True, quality=8000, evidence=ends, **{"from": "carol"})
            votes.append([p["address"], *vote, *common])
        for v in votes:  # one signer: one tx at a time
            cli("tx", "round", "verdict", "1", "0", *v)
        wait_phase("vote_reveal")
        for v in votes:
            cli("tx", "round", "reveal-vote", "1", "0", *v)

        wait_phase("attest")
        agg = h("aggregate/1/0")
        parallel(*[["tx", "round", "attest", "1", "0", agg, "--from", n, *common] for n in addrs])

        wait_phase("finalized")
        res = q("round", "1", "0", "--prove")
        assert res["proof_verified"] is True
        fin = res["result"]
        assert fin["attested_model_hash"] == agg
        assert all(p["outcome"] == "accepted" and p["reward"] > 0 for p in fin["participants"])
        assert fin["reward_paid"] <= 10_000_000 and fin["verifier_paid"] <= 1_000_000
        job = q("job", "1", "--prove")
        assert job["proof_verified"] and job["result"]["status"] == "completed"
        assert job["result"]["current_model_hash"] == agg
        # SLA figures recorded by the round steps, proven, in `query provider`
        prov = q("provider", addrs["alice"], "--prove")
        sla = prov["result"]["sla"]
        assert prov["proof_verified"] and (
            sla["rounds_drawn"],
            sla["committed_on_time"],
            sla["revealed"],
        ) == (1, 1, 1)
        assert sla["attested"] == 1 and sla["uptime_bps"] == 10_000
        assert sla["earned_participant"] == next(
            p["reward"] for p in fin["participants"] if p["address"] == addrs["alice"]
        )
        assert (
            "committed on time 1/1 (100.00 %)"
            in cli("query", "provider", addrs["alice"], "--node", node.url).stdout
        )
        table = cli("query", "round", "1", "0", "--node", node.url).stdout
        assert "phase finalized" in table and "accepted" in table
        # the events are indexed: find the round's finalization by block_search
        with node.client() as c:
            found = c.call("block_search", query="round.finalized.job_id=1", per_page="10")
            assert int(found["total_count"]) == 1
    finally:
        node.stop()
