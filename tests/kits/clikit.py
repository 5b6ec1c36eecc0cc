"""Run the real ``loconet`` CLI in a subprocess: exit code, stdout and stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(
    *args: str, stdin: str | None = None, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "node.cli", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        input=stdin,
        timeout=timeout,
        check=False,
    )


def flags(**kw: object) -> list[str]:
    """Long options from keywords, in order: ``flags(rounds=1, reward_per_round="1loco")`` is
    ``["--rounds", "1", "--reward-per-round", "1loco"]``; ``True`` gives a bare flag."""
    out: list[str] = []
    for name, value in kw.items():
        out.append("--" + name.replace("_", "-"))
        if value is not True:
            out.append(str(value))
    return out


def offline(home: object, *args: str, chain_id: str = "c", sequence: int = 0) -> list[str]:
    """``args`` as an offline build (``--generate-only`` with the chain id and sequence given, so
    no node is asked) from the keyring in ``home``."""
    return [*args, *flags(home=home, generate_only=True, chain_id=chain_id, sequence=sequence)]


# the smallest job `tx job create` accepts: one round of a tiny model (add the model and data)
SMALL_JOB = flags(
    rounds=1, inner_steps=8, trace_interval=2, participants=1, shards=2, tokens_per_step=1024
)
