"""`loconet explorer` through the real CLI: flags, errors that name the fix, and the real server
answering while its node is down (no cometbft needed; tests/integration/test_explorer.py has
one)."""

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
    return subprocess.run(
        [*LOCONET, *args], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )


def test_help_has_an_example() -> None:
    r = run("explorer", "--help")
    assert r.returncode == 0 and "loconet explorer --node" in r.stdout and "--listen" in r.stdout


def test_bad_flags_name_the_fix() -> None:
    r = run("explorer", "--listen", "8080")
    assert (
        r.returncode == 1
        and "write HOST:PORT, e.g. 127.0.0.1:8080" in r.stderr
        and "Traceback" not in r.stderr
    )
    r = run("explorer", "--node", "ftp://x")
    assert r.returncode == 1 and "tcp://HOST:PORT" in r.stderr and "Traceback" not in r.stderr
    r = run("explorer", "--poll", "0")
    assert r.returncode == 1 and "--poll" in r.stderr


def test_serves_a_waiting_page_while_the_node_is_down(tmp_path: Path) -> None:
    base = find_free_base(random_bases(30000, 60000, 10), range(2))
    url = f"http://127.0.0.1:{base}"
    log = open(tmp_path / "explorer.out", "wb")  # noqa: SIM115 (closed below)
    p = subprocess.Popen(
        [
            *LOCONET,
            "explorer",
            "--node",
            f"tcp://127.0.0.1:{base + 1}",
            "--listen",
            f"127.0.0.1:{base}",
            "--poll",
            "0.3",
        ],
        cwd=ROOT,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
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
        assert (
            r.status_code == 200
            and "Waiting for the node" in r.text
            and 'class="dot off"' in r.text
        )
        assert f"127.0.0.1:{base + 1}" in r.text  # it says which node it waits for
        s = httpx.get(url + "/api/snapshot", timeout=2)
        assert s.status_code == 503 and s.json()["error"]
        assert httpx.get(url + "/static/style.css", timeout=2).status_code == 200
        assert httpx.get(url + "/tx/ZZ", timeout=5).status_code == 404
    finally:
        p.terminate()
        p.wait(10)
        log.close()


_SERVE = """
import sys
from node.explorer.server import serve
serve(sys.argv[1], "127.0.0.1", int(sys.argv[2]), poll=0.5, idle_timeout=float(sys.argv[3]))
"""


def test_invalid_slow_request_is_dropped(tmp_path: Path) -> None:
    """A client that never finishes its request (slowloris: one header line every second) held
    an explorer socket for aiohttp's default 75 s, and a dripping one for good; it is now closed
    idle_timeout (15 s by default, 2 s here) after it connected, as the blob server does."""
    import socket

    base = find_free_base(random_bases(30000, 60000, 10), range(2))
    p = subprocess.Popen(
        [sys.executable, "-c", _SERVE, f"http://127.0.0.1:{base + 1}", str(base), "2"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                s = socket.create_connection(("127.0.0.1", base), timeout=1)
                break
            except OSError:
                assert time.monotonic() < deadline and p.poll() is None
                time.sleep(0.2)
        t0 = time.monotonic()
        s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
        closed = None
        while time.monotonic() - t0 < 12:
            try:
                s.sendall(b"X-Drip: 1\r\n")
            except OSError:
                closed = time.monotonic() - t0
                break
            time.sleep(1)
        s.close()
        assert closed is not None and closed < 8, closed
    finally:
        p.terminate()
        p.wait(10)


def test_listen_takes_a_bracketed_ipv6_host() -> None:
    from node.cli.explorer import parse_listen

    assert parse_listen("[::1]:8080") == ("::1", 8080)
    assert parse_listen("127.0.0.1:8080") == ("127.0.0.1", 8080)


def test_invalid_unparsable_request_logs_no_traceback(tmp_path: Path) -> None:
    """aiohttp logged each request it could not parse (a non-UTF-8 URL, an 8 KiB header) as
    ERROR with a traceback on the explorer's stderr: anyone could flood it. Now one INFO line."""
    import socket

    base = find_free_base(random_bases(30000, 60000, 10), range(2))
    err = (tmp_path / "stderr").open("w+")
    p = subprocess.Popen(
        [sys.executable, "-c", _SERVE, f"http://127.0.0.1:{base + 1}", str(base), "5"],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=err,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", base), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline and p.poll() is None
                time.sleep(0.2)
        for bad in (b"GET /job/\xff\xfe HTTP/1.1", b"GET /?\xc3\xbf\xff HTTP/1.1"):
            s = socket.create_connection(("127.0.0.1", base), timeout=10)
            s.sendall(bad + b"\r\nConnection: close\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.0 400")
            s.close()
        assert httpx.get(f"http://127.0.0.1:{base}/static/style.css", timeout=5).status_code == 200
    finally:
        p.terminate()
        p.wait(10)
    err.seek(0)
    log = err.read()
    err.close()
    assert "Traceback" not in log and "Error handling request" not in log, log[-2000:]
