"""The explorer against a live testnet with real provider workers (issue 36): while the job runs,
its page shows each provider's live progress read from the worker's own /metrics (served on its
blob endpoint); once rounds are attested, the held-out loss of every attested model, equal to
what this test computes from the same blobs fetched by hash (as `make demo` does); the search box
finds the job and a provider's account; all in headless Chromium."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from node.local.manifest import load, workers_of
from node.worker import ml
from tests.integration.test_explorer import chromium
from tests.kits.nodekit import LOCONET, ROOT, free_port_base
from tests.kits.tnkit import blob_reader, network, query, wait_for
from trainer.data import Corpus

pytestmark = pytest.mark.integration


# long: one live testnet's job watched in the explorer as it runs; splitting hides the order
@pytest.mark.timeout(600)
def test_explorer_on_a_live_testnet_shows_heldout_loss_and_live_progress(tmp_path: Path) -> None:
    extra = ("--providers", "3", "--rounds", "2")
    with network(tmp_path, validators=2, extra=extra) as (d, nodes):
        m = load(d)
        job_id = m["job_id"]
        workers = workers_of(m)
        n0 = nodes[0]
        port = free_port_base()
        url = f"http://127.0.0.1:{port}"
        log = open(tmp_path / "explorer.out", "wb")  # noqa: SIM115 (closed in finally)
        explorer = subprocess.Popen(
            [*LOCONET, "explorer", "--node", n0.rpc_url, "--listen", f"127.0.0.1:{port}"],
            cwd=ROOT,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:

            def live_row() -> str | None:
                try:
                    page = httpx.get(f"{url}/job/{job_id}", timeout=10).text
                except httpx.HTTPError:
                    return None
                return page if 'id="live"' in page else None

            # a worker reports the round it trained on its endpoint's /metrics
            page = wait_for("a provider's live progress on the job page", live_row, timeout=300)
            assert any(f'href="/provider/{w.address}"' in page for w in workers)
            job = wait_for(
                "the job to complete",
                lambda: (j := query(n0, f"/job/{job_id}"))["status"] == "completed" and j,
                timeout=400,
                every=1.0,
            )
            rounds = query(n0, f"/rounds/{job_id}")["rounds"]
            attested = [r["attested_model_hash"] for r in rounds if r["attested_model_hash"]]
            assert attested, "no round attested a model"
            plan = ml.JobPlan.from_job(job)
            with blob_reader(tmp_path, [w.endpoint for w in workers]) as blob:
                corpus = Corpus(blob(plan.dataset_id))
                want = [
                    f"{ml.val_loss(plan, blob(h), corpus):.3f}"
                    for h in [job["spec"]["initial_model_hash"], *attested]
                ]

            def all_shown() -> str | None:
                page = httpx.get(f"{url}/job/{job_id}", timeout=10).text
                return page if all(v in page for v in want) else None

            try:
                wait_for("the held-out losses on the job page", all_shown, timeout=180, every=1.0)
            except AssertionError:
                page = httpx.get(f"{url}/job/{job_id}", timeout=10).text
                (tmp_path / "job.html").write_text(page)
                shown = re.findall(r"[0-9]\.[0-9]{3}", page)
                raise AssertionError(f"want {want}; the page shows {sorted(set(shown))}") from None
            prof = tmp_path / "chromium-profile"
            dom = chromium(prof, "--dump-dom", f"{url}/job/{job_id}")
            cells = re.findall(r'<td class="r heldout">([0-9.]+)</td>', dom)
            assert sorted(cells) == sorted(want[1:]), (cells, want)
            assert f'id="heldout-latest">{want[-1]}<' in dom
            assert "Loss against tokens trained" in dom and 'id="eta">done<' in dom
            found = chromium(prof, "--dump-dom", f"{url}/search?q=" + quote(f"job {job_id}"))
            assert f"Job {job_id} <span" in found
            acct = chromium(prof, "--dump-dom", f"{url}/search?q={workers[0].address}")
            assert "Account <span" in acct and f'href="/provider/{workers[0].address}"' in acct
            chromium(
                prof,
                "--screenshot=" + str(tmp_path / "explorer-testnet-job.png"),
                "--window-size=1400,1800",
                f"{url}/job/{job_id}",
            )
        finally:
            explorer.terminate()
            try:
                explorer.wait(10)
            except subprocess.TimeoutExpired:
                explorer.kill()
                explorer.wait(10)
            log.close()
