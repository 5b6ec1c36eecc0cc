"""`loconet explorer` through the real CLI: flags, errors that name the fix, and the real server
answering while its node is down (no cometbft needed; tests/integration/test_explorer.py has one)."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import httpx

from node.ports import find_free_base, random_bases

ROOT = Path(__file__).resolve().parents[2]
LOCONET = [sys.executable, "-m", "node.cli"]


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*LOCONET, *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False)


def test_help_has_an_example() -> None:
    r = run("explorer", "--help")
    assert r.returncode == 0 and "loconet explorer --node" in r.stdout and "--listen" in r.stdout


def test_bad_flags_name_the_fix() -> None:
    r = run("explorer", "--listen", "8080")
    assert r.returncode == 1 and "write HOST:PORT, e.g. 127.0.0.1:8080" in r.stderr and "Traceback" not in r.stderr
    r = run("explorer", "--node", "ftp://x")
    assert r.returncode == 1 and "tcp://HOST:PORT" in r.stderr and "Traceback" not in r.stderr
    r = run("explorer", "--poll", "0")
    assert r.returncode == 1 and "--poll" in r.stderr


def test_serves_a_waiting_page_while_the_node_is_down(tmp_path: Path) -> None:
    base = find_free_base(random_bases(30000, 60000, 10), range(2))
    url = f"http://127.0.0.1:{base}"
    log = open(tmp_path / "explorer.out", "wb")  # noqa: SIM115 (closed below)
    p = subprocess.Popen([*LOCONET, "explorer", "--node", f"tcp://127.0.0.1:{base + 1}", "--listen", f"127.0.0.1:{base}",
                          "--poll", "0.3"], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                r = httpx.get(url + "/", timeout=2)
                if "cannot reach" in r.text or "refused" in r.text:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, (tmp_path / "explorer.out").read_text()
            time.sleep(0.3)
        assert r.status_code == 200 and "Waiting for the node" in r.text and 'class="dot off"' in r.text
        assert f"127.0.0.1:{base + 1}" in r.text  # it says which node it waits for
        s = httpx.get(url + "/api/snapshot", timeout=2)
        assert s.status_code == 503 and s.json()["error"]
        assert httpx.get(url + "/static/style.css", timeout=2).status_code == 200
        assert httpx.get(url + "/tx/ZZ", timeout=5).status_code == 404
    finally:
        p.terminate()
        p.wait(10)
        log.close()
