"""The block-explorer side of `loconet explorer` (issue 36), in headless Chromium against a real
node: the search box finds a height, a tx hash, an address and a job id; the network page lists
recent blocks and txs and the validators with moniker, stake and uptime; an account page shows
its proven balance and lists its txs; a tx page shows hex hashes, amounts in LOCO and links to
its job; a block's events are decoded (amounts in LOCO, addresses linked)."""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from abci_app.codec.address import to_bech32
from abci_app.codec.tx import Ed25519Signer
from abci_app.pb import bank_pb2, tx_pb2
from node.client.keys import Keyring
from node.client.market_msgs import build_create_job, build_register_provider, send_tx
from node.client.rpc import Client
from node.client.units import fmt_loco
from tests.integration.test_explorer import chromium
from tests.kits.nodekit import LOCONET, ROOT, Node, free_port_base
from trainer.determinism import stack_id


def h(s: str) -> bytes:
    return hashlib.sha256(s.encode()).digest()


def job_spec() -> dict:
    return {
        "model": {"n_layers": 2, "n_heads": 2, "d_model": 64, "context_len": 64, "vocab_size": 256},
        "initial_model_hash": h("model0").hex(),
        "dataset_id": h("dataset").hex(),
        "inner_steps": 100,
        "trace_interval": 10,
        "compression_policy": "topk:0.01+int4",
        "participants_per_round": 1,
        "num_shards": 4,
        "tokens_per_step": 1024,
        "windows": {"commit": 200, "reveal": 50, "verdict": 50, "attest": 50},
        "challenge_bps": 500,
        "verifiers_per_challenge": 1,
        "segments_per_challenge": 1,
        "determinism_mode": "exact",
        "tolerance_ppm": 0,
        "stack": stack_id(),
        "rounds": 1,
        "reward_per_round": 10_000_000,
        "verifier_reward_per_round": 1_000_000,
    }


# long: one live node and one browser session, page by page; splitting hides the order
@pytest.mark.integration
@pytest.mark.timeout(300)
def test_search_account_recent_and_decoded_pages_in_chromium(tmp_path: Path) -> None:
    node = Node(tmp_path / "node")
    node.init()
    node.start()
    explorer = None
    log = open(tmp_path / "explorer.out", "wb")  # noqa: SIM115 (closed in finally)
    try:
        node.wait_height(2)
        val = Keyring(node.home).get("validator").signer
        alice = Ed25519Signer(h("explorer-browser-alice"))
        alice_addr = to_bech32(alice.address)
        with Client(node.url) as c:
            fund = send_tx(
                c,
                val,
                [tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=alice.address, amount=2_500_000_000))],
            )
            reg = send_tx(
                c,
                alice,
                [
                    build_register_provider(
                        2_000_000_000, ["H100:8:81920"], 50_000, "eu-west", "http://127.0.0.1:9"
                    )
                ],
            )
            job = send_tx(c, val, [build_create_job(job_spec())])
        fund_hash, job_hash = fund["txhash"], job["txhash"]
        assert reg["txhash"] and fund["height"] > 0

        port = free_port_base()
        url = f"http://127.0.0.1:{port}"
        explorer = subprocess.Popen(
            [*LOCONET, "explorer", "--node", node.url, "--listen", f"127.0.0.1:{port}"],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for _ in range(120):  # the snapshot holds the job and the three txs
            try:
                snap = httpx.get(url + "/api/snapshot", timeout=10).json()
            except httpx.HTTPError:
                snap = {}
            if snap.get("jobs") and len(snap.get("recent_txs", [])) >= 3:
                break
            time.sleep(0.5)
        assert snap.get("jobs") and not snap["untrusted"], snap.get("error")
        prof = tmp_path / "chromium-profile"

        # the network page: validators with moniker, stake and uptime; recent blocks and txs
        dom = chromium(prof, "--dump-dom", url + "/")
        v = snap["validators"][0]
        assert v["moniker"] and v["tokens"] > 0 and v["uptime_bps"] > 9_000, v
        assert isinstance(v["missed_blocks"], int)
        table = dom[dom.index('id="validators"') :]
        assert v["moniker"] in table[:3000] and "LOCO" in table[:3000]
        assert 'id="recent-blocks"' in dom and 'id="recent-txs"' in dom
        for tx in (fund_hash, job_hash):
            assert f'href="/tx/{tx}"' in dom, tx
        assert re.search(r'href="/job/1">job 1</a>', dom)  # the create tx, linked to its job

        # the validator's page: moniker, stake (proven), uptime, the blocks it proposed
        vdom = chromium(prof, "--dump-dom", url + f"/validator/{v['address']}")
        assert v["moniker"] in vdom and 'id="stake"' in vdom and 'id="uptime"' in vdom
        assert f'href="/account/{v["operator"]}"' in vdom and "Recent blocks it proposed" in vdom

        # search: a height, a tx hash, an address, a job id (Chromium follows the redirects)
        for q, want in [
            (str(fund["height"]), f"Block {fund['height']}"),
            (fund_hash.lower(), f'Transaction <span class="mono small">{fund_hash}</span>'),
            (alice_addr, "Account <span"),
            ("job 1", "Job 1 <span"),
            (v["address"].lower(), "Validator "),
            ("loco1qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq", "Nothing on this chain"),
        ]:
            page = chromium(prof, "--dump-dom", url + "/search?q=" + quote(q))
            (tmp_path / "search.html").write_text(page)
            assert want in page, q
        # a number that is both a height and a job id: both offered
        both = httpx.get(url + "/search?q=1", timeout=10)
        assert 'href="/job/1"' in both.text and 'href="/block/1"' in both.text

        # the account page: proven balance, its txs (signed and received), linked
        dom = chromium(prof, "--dump-dom", url + f"/account/{alice_addr}")
        with Client(node.url) as c:
            bal = json.loads(c.abci_query(f"/account/{alice_addr}").value)["balance"]
        assert f">{fmt_loco(bal)}<" in dom and f"{bal:,} uloco" in dom, bal  # after its fee
        for tx in (fund_hash, reg["txhash"]):
            assert f'href="/tx/{tx}"' in dom, tx
        assert f'href="/provider/{alice_addr}"' in dom
        chromium(
            prof,
            "--screenshot=" + str(tmp_path / "explorer-account.png"),
            "--window-size=1400,1100",
            url + f"/account/{alice_addr}",
        )
        assert (tmp_path / "explorer-account.png").stat().st_size > 20_000

        # the tx page: hex hashes, amounts in LOCO with uloco on hover, numbers as numbers, the
        # job it created linked
        dom = chromium(prof, "--dump-dom", url + f"/tx/{job_hash}")
        assert 'id="tx-job"' in dom and 'href="/job/1"' in dom
        assert h("model0").hex() in dom  # bytes in hex, not base64
        assert '"reward_per_round": 10000000' in dom  # a number, not a quoted string
        assert re.search(r'title="10,000,000 uloco">10 LOCO<', dom)
        dom = chromium(prof, "--dump-dom", url + f"/tx/{fund_hash}")
        assert f'href="/account/{alice_addr}"' in dom and "2500 LOCO" in dom

        # a block's events: the fee distribution decoded (LOCO, the recipient linked)
        dom = chromium(prof, "--dump-dom", url + f"/block/{fund['height']}")
        assert "fee.distributed" in dom
        assert re.search(r'class="address" href="/account/loco1[0-9a-z]+"', dom)
        assert re.search(r'class="amount" title="[0-9,]+ uloco">[0-9.]+ LOCO<', dom)
    finally:
        if explorer is not None:
            explorer.terminate()
            try:
                explorer.wait(10)
            except subprocess.TimeoutExpired:
                explorer.kill()
                explorer.wait(10)
        log.close()
        node.stop()
