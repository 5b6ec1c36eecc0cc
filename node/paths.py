"""Where loconet finds its tools: the project's own ``.bin/cometbft`` (built by ``make setup``),
then ``$LOCONET_COMETBFT``, then ``cometbft`` on PATH. The user's PATH is never modified."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class ToolMissing(Exception):
    pass


def cometbft_binary() -> str:
    env = os.environ.get("LOCONET_COMETBFT")
    if env:
        if not os.access(env, os.X_OK):
            raise ToolMissing(
                f"LOCONET_COMETBFT={env} is not an executable file: fix the path or unset it"
            )
        return env
    local = PROJECT_ROOT / ".bin" / "cometbft"
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    found = shutil.which("cometbft")
    if found:
        return found
    raise ToolMissing("cometbft not found: run `make setup` (it builds cometbft v0.38 into .bin/)")
