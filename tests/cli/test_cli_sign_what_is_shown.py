"""`tx sign` signs body_bytes, so the messages it shows are decoded from them (attacker-review
regression): a document whose "messages" say "send 1uloco" over body_bytes that send 999999loco
was signed as the latter while its output still showed the former. Now a document whose
messages are not what its bytes hold is refused by `tx sign` and by `tx broadcast`, and the
signed document's messages are the decoded bytes."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from abci_app.codec.tx import decode_tx
from tests.kits.clikit import offline, run

NOWHERE = "http://127.0.0.1:1"  # nothing listens: a refusal must come before any network


def _keys(home: Path) -> str:
    for name in ("alice", "mallory"):
        assert run("keys", "add", name, "--home", str(home)).returncode == 0
    out = run("keys", "list", "--home", str(home)).stdout.split()
    return out[out.index("mallory") + 1]


def _unsigned(home: Path, to: str, amount: str) -> dict:
    r = run(*offline(home, "tx", "bank", "send", to, amount, "--from", "alice", "--fee", "1000"))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def _sign(home: Path, f: Path) -> subprocess.CompletedProcess[str]:
    return run(
        "tx", "sign", str(f), "--from", "alice", "--home", str(home),
        "--chain-id", "c", "--sequence", "0", "--node", NOWHERE,
    )  # fmt: skip


def test_sign_refuses_messages_that_are_not_the_bytes(tmp_path: Path) -> None:
    home = tmp_path / "h"
    mallory = _keys(home)
    doc = _unsigned(home, mallory, "1uloco")
    doc["body_bytes"] = _unsigned(home, mallory, "999999loco")["body_bytes"]
    f = tmp_path / "tampered.json"
    f.write_text(json.dumps(doc))
    r = _sign(home, f)
    assert r.returncode == 1 and "Traceback" not in r.stderr
    assert "not what its body_bytes holds" in r.stderr and "999999000000" in r.stderr, r.stderr
    assert r.stdout == ""


def test_signed_messages_are_the_decoded_bytes(tmp_path: Path) -> None:
    home = tmp_path / "h"
    mallory = _keys(home)
    doc = _unsigned(home, mallory, "7uloco")
    del doc["messages"]  # a document without them is signed, and shows what it signs
    f = tmp_path / "plain.json"
    f.write_text(json.dumps(doc))
    r = _sign(home, f)
    assert r.returncode == 0, r.stderr
    signed = json.loads(r.stdout)
    sent = [m.amount for _, m in decode_tx(base64.b64decode(signed["tx"])).msgs]
    assert sent == [7] and [m["send"]["amount"] for m in signed["messages"]] == sent


def test_broadcast_refuses_a_signed_document_whose_messages_were_altered(tmp_path: Path) -> None:
    home = tmp_path / "h"
    mallory = _keys(home)
    f = tmp_path / "u.json"
    f.write_text(json.dumps(_unsigned(home, mallory, "999999loco")))
    signed = json.loads(_sign(home, f).stdout)
    signed["messages"][0]["send"]["amount"] = 1  # what the victim is shown
    g = tmp_path / "signed.json"
    g.write_text(json.dumps(signed))
    r = run("tx", "broadcast", str(g), "--node", NOWHERE)
    assert r.returncode == 1 and "not what its tx holds" in r.stderr, r.stderr
    assert "cannot reach" not in r.stderr  # refused before connecting
