"""Arguments a user may mistype (red-team regressions): one line naming the fix, exit 1, no
traceback (a --node that httpx cannot parse raised httpx.InvalidURL; an uncreatable --home
printed cometbft's Go panic and stack)."""

from __future__ import annotations

import json

import pytest

from tests.kits.clikit import run


@pytest.mark.parametrize(
    "node",
    ["notaport:abc", "http://[::1", "127.0.0.1:x", "http://127.0.0.1:99999", "tcp://[::1]:0"],
)
def test_invalid_node_url_is_one_line(node: str) -> None:
    r = run("status", "--node", node)
    assert r.returncode == 1 and "Traceback" not in r.stderr + r.stdout, r.stderr
    assert "http://HOST:PORT" in r.stderr and len(r.stderr.strip().splitlines()) == 1
    # a port out of range was "connection refused ... nothing listens on" that port
    assert "refused" not in r.stderr and "nothing listens" not in r.stderr, r.stderr
    j = run("status", "--node", node, "-o", "json")
    assert j.returncode == 1 and "http://HOST:PORT" in json.loads(j.stdout)["error"]


def test_node_url_port_must_be_a_tcp_port() -> None:
    from node.client.rpc import NodeUnreachable, normalize_url

    for ok in ("127.0.0.1:1", "http://[::1]:65535/", "tcp://h:26657", "https://h", "http://h/a:0"):
        assert normalize_url(ok).startswith(("http://", "https://"))
    for bad in ("127.0.0.1:0", "http://h:65536", "https://[::1]:99999/x"):
        with pytest.raises(NodeUnreachable, match="is not a TCP port"):
            normalize_url(bad)


def test_invalid_uncreatable_home(tmp_path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = run("init", "--home", str(blocker / "home"), "--chain-id", "t", "--moniker", "m")
    assert r.returncode == 1 and "goroutine" not in r.stderr and "Traceback" not in r.stderr
    assert r.stderr.startswith("error: cannot create the home") and "--home" in r.stderr


@pytest.mark.parametrize("listen", ["127.0.0.1:99999", "127.0.0.1:²", "127.0.0.1:", "nohost"])
def test_invalid_blob_serve_listen(tmp_path, listen: str) -> None:
    # a port past 65535 raised OverflowError from bind() with a traceback
    r = run("blob", "serve", "--dir", str(tmp_path / "s"), "--listen", listen, timeout=30)
    assert r.returncode in (1, 2) and "Traceback" not in r.stderr, r.stderr
    assert "--listen" in r.stderr and "HOST:PORT" in r.stderr


@pytest.mark.parametrize(
    "args", [("query", "block", "abc"), ("tx", "bank", "send", "x"), ("query", "nosuch")]
)
def test_invalid_usage_with_json_output_is_json(args: tuple[str, ...]) -> None:
    # argparse's usage errors were plain text even with -o json
    for flag in (("-o", "json"), ("--output=json",)):
        r = run(*args, *flag)
        assert r.returncode == 2, r.stderr
        body = json.loads(r.stdout)
        assert body["error"].startswith("loconet ") and body["usage"].startswith("usage: loconet")
    r = run(*args)  # without -o json: argparse's text on stderr, as before
    assert r.returncode == 2 and r.stdout == "" and "error:" in r.stderr


def test_invalid_key_name_with_trailing_newline(tmp_path) -> None:
    # NAME_RE ended in $, which matches before a final newline: "bob\n" made a key file "bob\n.json"
    home = tmp_path / "h"
    r = run("keys", "add", "bob\n", "--home", str(home))
    assert r.returncode == 1 and "invalid key name" in r.stderr, r.stderr
    assert not (home / "keyring").exists() or list((home / "keyring").iterdir()) == []


@pytest.mark.parametrize(
    "flags",
    [
        ("--validators", "500"),
        ("--base-port", "70000"),
        ("--base-port", "-5"),
        ("--accounts", "-3"),
    ],
)
def test_invalid_testnet_sizes_write_nothing(tmp_path, flags: tuple[str, ...]) -> None:
    # --validators 500 wrote 500 node homes before failing on ports past 65535; --base-port 70000
    # raised OverflowError from bind()
    d = tmp_path / "tn"
    r = run("testnet", "up", "--dir", str(d), *flags, timeout=60)
    assert r.returncode == 1 and "Traceback" not in r.stderr, r.stderr
    last = r.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and ("--base-port" in last or "--accounts" in last)
    assert not d.exists()
