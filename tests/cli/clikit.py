"""Run the real ``loconet`` CLI in a subprocess: exit code, stdout and stderr."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str, stdin: str | None = None, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "node.cli", *args], capture_output=True, text=True, cwd=ROOT,
                          input=stdin, timeout=timeout, check=False)
