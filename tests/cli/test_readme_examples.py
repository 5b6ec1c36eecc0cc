"""The README's examples run on a clone as written (issue 36): every ``loconet`` command in its
``sh`` blocks parses with the real CLI parser (placeholders such as ``loco1...`` filled in), no
example reads a path outside the repository, the job example's own values raise no warning,
and the ``train simulate`` example runs (with fewer rounds, same flags otherwise)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from node.cli.main import build_parser
from node.client.market_msgs import job_audit_warning

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()
ADDR = "loco1vghnq9cs8zrcg88l724uzc6u3gx8e362qegzak"
HASH = "9DC78738" + "0" * 56


def sh_blocks() -> list[str]:
    return re.findall(r"```sh\n(.*?)```", README, flags=re.S)


def commands() -> list[str]:
    """Each ``loconet ...`` line of the sh blocks, continuation lines joined, comments cut."""
    out = []
    for block in sh_blocks():
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            line = line.split("  #", 1)[0].split(" # ", 1)[0].strip()
            if "loconet " in line and not line.startswith("#"):
                out.append(line[line.index("loconet ") :])
    return out


def fill(cmd: str) -> list[str] | None:
    """The command's argv with the README's placeholders replaced; None for a line that is a
    pattern, not a command (``a|b``, ``...`` standing for arguments)."""
    cmd = cmd.split(" > ")[0].split(" | ")[0]
    cmd = re.sub(r" \[--?[^\]]*\]", "", cmd)  # optional flags: [--device auto|cpu|cuda]
    if re.search(r"\w\|\w", cmd) or " ... " in cmd or cmd.endswith(" ..."):
        return None
    cmd = cmd.replace("loco1...", ADDR).replace("9DC78738...037B", HASH)
    cmd = re.sub(r"\[[A-Z]+\]", "", cmd)  # [HEIGHT]: optional
    return shlex.split(cmd)[1:]


def test_no_example_reads_outside_the_clone() -> None:
    assert "../shared" not in README


@pytest.mark.parametrize("cmd", commands())
def test_every_loconet_example_parses(cmd: str) -> None:
    argv = fill(cmd)
    if argv is None:  # a pattern (``blob ls|gc|pin ...``): every alternative is a real command
        for alt in alternatives(cmd):
            with pytest.raises(SystemExit) as e:
                build_parser().parse_args([*alt, "--help"])
            assert e.value.code == 0, f"README pattern names no such command: {alt} ({cmd})"
        return
    try:
        build_parser().parse_args(argv)
    except SystemExit as e:
        pytest.fail(f"README example does not parse ({e.code}): {cmd}")


def alternatives(cmd: str) -> list[list[str]]:
    """The commands a pattern line stands for: the words before its ``a|b|c`` word, then each
    alternative (``loconet tx round submit-update|reveal ...`` -> [tx round submit-update], ...)."""
    words = cmd.split()[1:]
    i = next(k for k, w in enumerate(words) if re.fullmatch(r"[\w-]+(\|[\w-]+)+", w))
    return [[*words[:i], alt] for alt in words[i].split("|")]


def test_the_job_example_warns_about_nothing() -> None:
    job = next(c for c in commands() if c.startswith("loconet tx job create"))
    a = build_parser().parse_args(fill(job))
    spec = {
        "inner_steps": a.inner_steps,
        "trace_interval": a.trace_interval,
        "participants_per_round": a.participants,
    }
    assert job_audit_warning(spec) is None, job_audit_warning(spec)


def test_train_simulate_example_runs(tmp_path: Path) -> None:
    from node.cli.main import main

    cmd = next(c for c in commands() if c.startswith("loconet train simulate"))
    argv = fill(cmd)
    assert argv is not None and "--data" not in argv  # the built-in corpus: nothing to fetch
    argv = [x if x != "runs/demo" else str(tmp_path / "demo") for x in argv]
    i = argv.index("--rounds")
    argv[i + 1] = "1"  # the example's flags, one round instead of ten
    assert main(argv) == 0
    assert (tmp_path / "demo" / "log.json").exists()
