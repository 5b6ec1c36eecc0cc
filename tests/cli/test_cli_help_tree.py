"""The whole `loconet` command tree, walked through its parser: every command and command group
has --help with an example, every leaf's examples parse to that very command, and every command
that prints results takes `-o json` (the few that run in the foreground or stream a log are
named below). A command added without these fails here."""

from __future__ import annotations

import argparse
import contextlib
import io
import shlex
from collections.abc import Iterator

import pytest

from node.cli.main import build_parser, wrap_command

# foreground processes (a node, a server, a worker) and a log stream: nothing to print as JSON
NO_JSON = {
    "start",
    "abci",
    "blob serve",
    "explorer",
    "provider run",
    "testnet logs",
}


def walk(
    p: argparse.ArgumentParser, path: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], argparse.ArgumentParser, bool]]:
    """(path, parser, is_leaf) for every command under ``p``, groups included."""
    subs = [a for a in p._actions if isinstance(a, argparse._SubParsersAction)]
    yield path, p, not subs
    for s in subs:
        for name, child in s.choices.items():
            yield from walk(child, (*path, name))


PARSER = build_parser()
TREE = [(" ".join(path), p, leaf) for path, p, leaf in walk(PARSER) if path]
LEAVES = [(name, p) for name, p, leaf in TREE if leaf]


def help_of(p: argparse.ArgumentParser) -> str:
    return p.format_help()


def test_the_tree_is_walked() -> None:
    assert len(LEAVES) >= 70 and {"tx bank send", "query rounds", "train verify"} <= {
        n for n, _ in LEAVES
    }


@pytest.mark.parametrize("name,p", [(n, p) for n, p, _ in TREE], ids=[n for n, _, _ in TREE])
def test_every_command_and_group_has_an_example(name: str, p: argparse.ArgumentParser) -> None:
    text = help_of(p)
    assert "example" in text.lower() and f"loconet {name}" in text, text[-600:]
    assert p.description, f"`loconet {name} --help` says nothing about what it does"


def examples_of(p: argparse.ArgumentParser) -> list[str]:
    """The example command lines of a leaf's help: continuation lines joined, `echo ... |`, a
    trailing comment and a `> FILE` redirection cut off."""
    out: list[str] = []
    lines = (p.epilog or "").splitlines()
    i = 0
    while i < len(lines):
        line = lines[i].strip()
        i += 1
        if not (line.startswith("loconet ") or "| loconet " in line):
            continue
        while line.endswith("\\") and i < len(lines):
            line = line[:-1] + " " + lines[i].strip()
            i += 1
        line = line.split("| ", 1)[-1].split("  #")[0].split(" > ")[0]
        out.append(line)
    return out


@pytest.mark.parametrize("name,p", LEAVES, ids=[n for n, _ in LEAVES])
def test_every_leaf_example_parses_to_its_command(name: str, p: argparse.ArgumentParser) -> None:
    exs = [e for e in examples_of(p) if " ... " not in e]  # `simulate ... --resume`: elided
    assert exs, f"no runnable example in `loconet {name} --help`"
    for ex in exs:
        argv = shlex.split(ex)[1:]
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                args = PARSER.parse_args(argv)
        except SystemExit:
            pytest.fail(f"example does not parse: {ex}\n{err.getvalue()}")
        if argv[: len(name.split())] == name.split():
            assert args.func is p.get_default("func"), ex


@pytest.mark.parametrize("name,p", LEAVES, ids=[n for n, _ in LEAVES])
def test_every_command_that_prints_results_takes_json(
    name: str, p: argparse.ArgumentParser
) -> None:
    takes = any("-o" in a.option_strings for a in p._actions)
    if name in NO_JSON:
        assert not takes, f"{name} takes -o now: drop it from NO_JSON"
        return
    assert takes, f"`loconet {name}` prints results but has no -o json"
    o = next(a for a in p._actions if "-o" in a.option_strings)
    assert "json" in (o.choices or ())


def test_group_examples_are_wrapped_runnable_lines() -> None:
    long = "loconet tx job create --from owner --rounds 3 " + " ".join(
        f"--flag{i} value{i}" for i in range(20)
    )
    lines = wrap_command(long)
    assert len(lines) > 1 and all(len(x) <= 92 for x in lines)
    assert all(x.endswith(" \\") for x in lines[:-1])
    # a flag stays with its value, and joining the lines gives the command back
    assert all(not x.rstrip(" \\").endswith(("--rounds", "--flag3")) for x in lines)
    assert " ".join(x.rstrip(" \\").strip() for x in lines) == long
    quoted = "echo 'a b c' | loconet keys add x --recover --home h"
    assert wrap_command(quoted) == [quoted]


def test_rewards_total_says_when_it_covers_only_the_recent_blocks(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`query rewards` of a validator read its 100 most recent rewarded blocks and printed their
    sum as "total": it now says how many of how many blocks were read (JSON: complete false)."""
    import json

    from node.cli import main as cli
    from node.cli import tx as cli_tx

    addr = "loco12mhfny5zvckr4qgzg5swup48v43cua8hc7llry"

    class FakeNode:
        def __enter__(self) -> FakeNode:
            return self

        def __exit__(self, *a: object) -> None:
            pass

        def call(self, method: str, **kw: str) -> dict:
            if method == "block_search":
                if kw["query"].startswith("reward.paid"):
                    return {"blocks": [], "total_count": "0"}
                n = int(kw["per_page"])
                blocks = [{"block": {"header": {"height": str(500 - i)}}} for i in range(n)]
                return {"blocks": blocks, "total_count": "500"}
            ev = {"type": "fee.distributed", "attributes": [
                {"key": "recipient", "value": addr}, {"key": "amount", "value": "7"}]}  # fmt: skip
            return {"finalize_block_events": [ev]}

    monkeypatch.setattr(cli_tx, "_client", lambda args: FakeNode())
    assert cli.main(["query", "rewards", addr, "--limit", "3"]) == 0
    text = capsys.readouterr().out
    assert "total 21 uloco" in text and "3 most recent of 500 blocks" in text, text
    assert cli.main(["query", "rewards", addr, "--limit", "3", "-o", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["total"] == 21 and data["complete"] is False
    assert data["blocks_matching"]["fee.distributed"] == 500


def test_query_tx_names_the_proposers_vote_extension_tx(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`query block` lists the proposer's vote-extension tx among the block's txs; `query tx` of
    its hash printed only "result: ok" (no signer, no messages, nothing said): it now says what
    the tx is (JSON: kind vote_extensions)."""
    import base64
    import json

    from abci_app.vote_extensions import INJECTED_PREFIX
    from node.cli import main as cli
    from node.cli import tx as cli_tx

    raw = base64.b64encode(INJECTED_PREFIX + b"\x0a\x00").decode()

    class FakeNode:
        def __enter__(self) -> FakeNode:
            return self

        def __exit__(self, *a: object) -> None:
            pass

        def tx(self, h: str) -> dict:
            return {"hash": h, "height": "9", "tx": raw, "tx_result": {"code": 0}}

    monkeypatch.setattr(cli_tx, "_client", lambda args: FakeNode())
    h = "AB" * 32
    assert cli.main(["query", "tx", h]) == 0
    assert "vote extensions" in capsys.readouterr().out
    assert cli.main(["query", "tx", h, "-o", "json"]) == 0
    d = json.loads(capsys.readouterr().out)
    assert d["kind"] == "vote_extensions" and d["height"] == 9 and "signer" not in d
