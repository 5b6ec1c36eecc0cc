"""`loconet explorer` against a live node with market activity, looked at in headless Chromium
(Debian's `chromium`, installed by scripts/setup.sh): what a person sees on the network page, a
job's page and a provider's page, screenshots kept under the test's tmp dir.

The market: three providers, one job of two rounds with every update challenged (the provider
that is not drawn verifies); in round 1 one participant misses its commit. Everything is signed
and broadcast with node/client/market_msgs.py, the library the CLI uses."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import threading
import time
from pathlib import Path

import httpx
import pytest

from abci_app.codec.address import to_bech32
from abci_app.codec.tx import Ed25519Signer, build_tx
from abci_app.jobs.incentives import compute_evidence
from abci_app.pb import bank_pb2, tx_pb2
from node.client.keys import Keyring
from node.client.market_msgs import (
    account_sequence,
    build_attest,
    build_bound_submit,
    build_create_job,
    build_register_provider,
    build_reveal_from_trace,
    build_reveal_vote,
    build_verdict,
    send_tx,
)
from node.client.rpc import Client
from tests.kits.nodekit import LOCONET, ROOT, Node, free_port_base
from trainer.determinism import stack_id

# blocks of ~0.5 s: room for a loaded machine
WINDOWS = {
    "commit": 6,
    "reveal": 5,
    "verdict": 5,
    "attest": 5,
}


def h(s: str) -> bytes:
    return hashlib.sha256(s.encode()).digest()


def trace(addr: bytes, rn: int) -> list[bytes]:
    return [h(f"{addr.hex()}/{rn}/{i}") for i in range(5)]  # H=8, k=2: states at steps 0,2,4,6,8


class Market:
    """Drives job 1 on the live node: every drawn provider does its duty, except the scripted
    misses."""

    def __init__(self, node: Node, providers: list[Ed25519Signer]) -> None:
        self.url = node.url
        self.by_addr = {to_bech32(k.address): k for k in providers}
        self.done: set[tuple] = set()
        self.missed: dict[int, str] = {}  # round -> provider that skips its commit

    def query(self, c: Client, path: str) -> dict:
        qr = c.abci_query(path)
        assert qr.code == 0, qr.log
        return json.loads(qr.value)

    def actions(self, c: Client) -> dict[str, list[tuple[tuple, tx_pb2.Msg]]]:
        todo: dict[str, list[tuple[tuple, tx_pb2.Msg]]] = {}

        def add(who: str, key: tuple, msg: tx_pb2.Msg) -> None:
            if key not in self.done:
                todo.setdefault(who, []).append((key, msg))

        for r in self.query(c, "/rounds/1")["rounds"]:
            rn, phase, base = r["round"], r["phase"], bytes.fromhex(r["base_model_hash"])
            for p in r["participants"]:
                a = p["address"]
                k = self.by_addr[a]
                if phase == "commit" and not p["commitment"]:
                    if rn == 1 and (rn not in self.missed or self.missed[rn] == a):
                        self.missed[rn] = (
                            a  # round 1: the first participant listed misses its commit
                        )
                        continue
                    add(
                        a,
                        ("commit", rn, a),
                        build_bound_submit(
                            1,
                            rn,
                            provider=k.address,
                            base_model=base,
                            payload=h(f"update/{a}/{rn}") * 100,
                            trace=trace(k.address, rn),
                            tokens=8192,
                            loss_before=5500 - 400 * rn,
                            loss_after=5200 - 450 * rn,
                            blob=f"http://127.0.0.1:26680/blob/{h(a).hex()}",
                        ),
                    )
                ch = p["challenge"]
                if phase == "reveal" and ch and not ch["reveal"]:
                    for seg in ch.get("segments", [ch["segment"]]):
                        add(
                            a,
                            ("reveal", rn, a, seg),
                            build_reveal_from_trace(
                                1,
                                rn,
                                seg,
                                trace(k.address, rn),
                                "http://127.0.0.1:26680/s",
                                "http://127.0.0.1:26680/e",
                                provider=k.address,
                                base_model=base,
                            ),
                        )
                if phase in ("verdict", "vote_reveal") and ch and ch["reveal"]:
                    # a secret vote: the hash in the verdict window, opened in the next one; the
                    # evidence is what re-executing each challenged segment yields (its end state)
                    ends = trace(k.address, rn)
                    reached = [ends[sg + 1] for sg in sorted(ch.get("segments", [ch["segment"]]))]
                    for v in ch["verifiers"]:
                        vk = self.by_addr[v["address"]]
                        q = 8_000 + 100 * rn
                        msg = (
                            build_verdict(vk, 1, rn, k.address, True, q, compute_evidence(reached))
                            if phase == "verdict"
                            else build_reveal_vote(vk, 1, rn, k.address, True, q, reached)
                        )
                        add(v["address"], (phase, rn, v["address"], a), msg)
                if phase == "attest" and p["outcome"] == "accepted" and not p["attested_hash"]:
                    add(a, ("attest", rn, a), build_attest(1, rn, h(f"aggregate/1/{rn}")))
        return todo

    def step(self) -> None:
        """One pass: each signer sends its due txs in order (waiting for each block), in
        parallel."""
        with Client(self.url) as c:
            todo = self.actions(c)
        errors: list[BaseException] = []

        def run(who: str, items: list[tuple[tuple, tx_pb2.Msg]]) -> None:
            """All of a signer's due txs at once (consecutive sequences), then wait for their
            blocks."""
            try:
                with Client(self.url) as c:
                    chain_id = c.status()["node_info"]["network"]
                    seq = account_sequence(c, who)
                    hashes = [
                        c.broadcast_tx_sync(
                            build_tx(
                                self.by_addr[who],
                                chain_id=chain_id,
                                msgs=[msg],
                                sequence=seq + i,
                                fee=10_000,  # above the default minimum fee
                            )
                        )
                        for i, (_, msg) in enumerate(items)
                    ]
                    for (key, _), tx_hash in zip(items, hashes, strict=True):
                        c.wait_for_tx(tx_hash)
                        self.done.add(key)
            except BaseException as e:  # noqa: BLE001 (re-raised below)
                errors.append(e)

        threads = [threading.Thread(target=run, args=kv) for kv in todo.items()]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]


def chromium(profile: Path, *args: str, timeout: float = 60) -> str:
    """Headless Chromium (Debian's package; root needs --no-sandbox), its profile under the test's
    tmp dir."""
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    if exe is None:
        pytest.fail("chromium not found: run `make setup` (it installs Debian's chromium package)")
    r = subprocess.run(
        [
            exe,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-dev-shm-usage",
            "--hide-scrollbars",
            "--no-first-run",
            f"--user-data-dir={profile}",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    return r.stdout


# long: one live node's market in one browser session, step by step; splitting hides the order
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_explorer_shows_the_market_in_chromium(tmp_path: Path) -> None:
    node = Node(tmp_path / "node")
    node.init()
    node.start()
    explorer = None
    try:
        node.wait_height(2)
        val = Keyring(node.home).get("validator").signer
        provs = [Ed25519Signer(h(f"explorer-provider-{i}")) for i in range(3)]
        with Client(node.url) as c:
            fund = [
                tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=k.address, amount=5_000_000_000))
                for k in provs
            ]
            send_tx(c, val, fund)

        def register(i: int, k: Ed25519Signer) -> None:
            with Client(node.url) as c:
                send_tx(
                    c,
                    k,
                    [
                        build_register_provider(
                            2_000_000_000,
                            ["H100:8:81920"],
                            50_000,
                            ["eu-west", "us-east", "ap-south"][i],
                            f"http://127.0.0.1:2668{i}",
                        )
                    ],
                )

        regs = [threading.Thread(target=register, args=(i, k)) for i, k in enumerate(provs)]
        for t in regs:
            t.start()
        for t in regs:
            t.join()
        with Client(node.url) as c:
            send_tx(
                c,
                val,
                [
                    build_create_job(
                        {
                            "model": {
                                "n_layers": 2,
                                "n_heads": 2,
                                "d_model": 64,
                                "context_len": 64,
                                "vocab_size": 256,
                            },
                            "initial_model_hash": h("model0").hex(),
                            "dataset_id": h("dataset").hex(),
                            "inner_steps": 8,
                            "trace_interval": 2,
                            "compression_policy": "topk:0.01+int4",
                            "participants_per_round": 2,
                            "num_shards": 4,
                            "tokens_per_step": 1024,
                            "windows": WINDOWS,
                            "challenge_bps": 10_000,
                            "verifiers_per_challenge": 1,
                            # one segment per challenge (the library's default is 15: on a
                            # 4-segment trace that opens every segment, which this hand-driven
                            # provider's reveals are not written for)
                            "segments_per_challenge": 1,
                            # exact mode: the hand-driven provider below re-executes by reading its
                            # own trace (tolerance mode would need probes: tests/jobs)
                            "determinism_mode": "exact",
                            "tolerance_ppm": 0,
                            "stack": stack_id(),
                            "rounds": 2,
                            "reward_per_round": 10_000_000,
                            "verifier_reward_per_round": 1_000_000,
                        }
                    )
                ],
            )

        # the explorer starts while the job runs: it must follow it live
        port = free_port_base()
        url = f"http://127.0.0.1:{port}"
        explorer_log = open(tmp_path / "explorer.out", "wb")  # noqa: SIM115 (closed in finally)
        explorer = subprocess.Popen(
            [
                *LOCONET,
                "explorer",
                "--node",
                node.url,
                "--listen",
                f"127.0.0.1:{port}",
                "--poll",
                "0.5",
            ],
            cwd=ROOT,
            stdout=explorer_log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        m = Market(node, provs)
        heights = []
        deadline = time.monotonic() + 150
        while True:
            m.step()
            with Client(node.url) as c:
                if m.query(c, "/job/1")["status"] == "completed":
                    break
            try:
                r = httpx.get(url + "/?fragment=1", timeout=5)
                heights.append(int(r.headers["X-Height"]))
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, "job 1 did not complete"
            time.sleep(0.2)
        node.wait_height(node.wait_height(0) + 2)
        # the snapshot the page shows has caught up with the completed job
        for _ in range(60):
            snap = httpx.get(url + "/api/snapshot", timeout=10).json()
            if snap.get("jobs") and snap["jobs"][0]["status"] == "completed":
                break
            time.sleep(0.5)
        assert snap["jobs"][0]["status"] == "completed" and not snap["untrusted"], snap.get("error")
        # it followed the chain live
        assert len(set(heights)) >= 3 and heights == sorted(heights), heights
        lazy = m.missed[1]
        prof = tmp_path / "chromium-profile"
        others = sorted(set(m.by_addr) - {lazy})

        # the network page, as a person sees it
        dom = chromium(prof, "--dump-dom", url + "/")
        for text in [
            "loconet-it",
            "Validators",
            "Providers",
            "Jobs",
            "completed",
            "2 finalized / 2 opened / 2",
            "Rewards paid, cumulative",
            "Reputation (of 10000)",
            "Model lineage",
            "proven against app hash",
        ]:
            assert text in dom, text
        # the app hash and height it shows are the chain's: header height+1 carries that hash
        hash_m = re.search(r'id="app-hash">([0-9A-F]{64})<', dom)
        height_m = re.search(r"records at height (\d+) proven", dom)
        assert hash_m and height_m, "the page shows the app hash and the height it proves"
        shown_hash, shown_height = hash_m.group(1), int(height_m.group(1))
        with Client(node.url) as c:
            assert c.app_hash_at(shown_height + 1).hex().upper() == shown_hash
        for a in m.by_addr:
            assert f'href="/provider/{a}"' in dom
        chromium(
            prof,
            "--screenshot=" + str(tmp_path / "explorer-network.png"),
            "--window-size=1400,1700",
            url + "/",
        )

        # the job: both rounds, their phases, every duty linked to its tx, payouts, the slash
        dom = chromium(prof, "--dump-dom", url + "/job/1")
        assert (
            "Round 0" in dom and "Round 1" in dom and "missed_commit" in dom and "finalized" in dom
        )
        tx_links = sorted(set(re.findall(r'href="/tx/([0-9A-F]{64})"', dom)))
        # commits, reveals, verdicts of round 0; commit, reveal, verdict of round 1
        assert len(tx_links) >= 2 + 2 + 2 + 1 + 1 + 1
        assert h("aggregate/1/0").hex()[:16] in dom and "Loss reported in the commitments" in dom
        assert "slash: missed_commit" in dom
        chromium(
            prof,
            "--screenshot=" + str(tmp_path / "explorer-job.png"),
            "--window-size=1400,2000",
            url + "/job/1",
        )
        tx_dom = chromium(prof, "--dump-dom", url + "/tx/" + tx_links[0])
        assert (
            "Messages" in tx_dom
            and "accepted" in tx_dom
            and any(
                kind in tx_dom
                for kind in ("submit_update", "reveal_segment", "verdict", "attest_model")
            )
        )

        # the provider that missed a commit: its SLA record and its slash
        dom = chromium(prof, "--dump-dom", url + f"/provider/{lazy}")
        sla = next(p for p in snap["providers"] if p["address"] == lazy)["sla"]
        assert sla["commits_due"] == sla["committed_on_time"] + 1 and sla["uptime_bps"] < 10_000
        assert "SLA figures" in dom and f"{sla['committed_on_time']} / {sla['commits_due']}" in dom
        assert "slashed (missed_commit" in dom and "job 1 / round 1" in dom
        chromium(
            prof,
            "--screenshot=" + str(tmp_path / "explorer-provider.png"),
            "--window-size=1400,1500",
            url + f"/provider/{lazy}",
        )
        for a in others:
            other = next(p for p in snap["providers"] if p["address"] == a)["sla"]
            assert other["earned_total"] > 0
        for name in ("explorer-network.png", "explorer-job.png", "explorer-provider.png"):
            assert (tmp_path / name).stat().st_size > 20_000, name
    finally:
        if explorer is not None:
            explorer.terminate()
            try:
                explorer.wait(10)
            except subprocess.TimeoutExpired:
                explorer.kill()
                explorer.wait(10)
            explorer_log.close()
        node.stop()
