import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.kits.chainkit import Chain, new_chain


@pytest.fixture
def chain() -> Chain:
    return new_chain()


@pytest.fixture(autouse=True, scope="session")
def _no_real_default_home(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every test runs with ``$LOCONET_HOME`` naming a folder that does not exist: a command
    given no --home (node/cli/main.py ``default_home``) never reads or writes the real
    ``~/.loconet``. Subprocesses inherit it; tests/cli narrows it per test."""
    old = os.environ.get("LOCONET_HOME")
    os.environ["LOCONET_HOME"] = str(Path(tmp_path_factory.mktemp("env")) / "no-default-home")
    yield
    if old is None:
        os.environ.pop("LOCONET_HOME", None)
    else:
        os.environ["LOCONET_HOME"] = old
