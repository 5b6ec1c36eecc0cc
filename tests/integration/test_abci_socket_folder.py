"""Issue 28, item 5: with a home path over ~100 bytes the ABCI Unix socket goes to
``/tmp/loconet-UID/``; when another user had made that folder first it was used as is (they
could then replace the socket, or reach it). The socket's folder is now created 0700 and the
node refuses to start, naming the fix, when it exists and is a symbolic link or not a folder, is
another user's, or is open to the group or others."""

from __future__ import annotations

import asyncio
import os
import re
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from abci_app.app import Application
from abci_app.server import ABCIServer, SocketDirError, private_socket_dir
from abci_app.store import MerkleStore
from node.local.config import AppConfig, Ports, resolve_abci_address
from node.local.init import init_home
from tests.kits.nodekit import free_port_base

ROOT = Path(__file__).resolve().parents[2]


def start_and_stop(address: str) -> None:
    async def run() -> None:
        srv = ABCIServer(Application(MerkleStore(None)), address)
        await srv.start()
        await srv.stop()

    asyncio.run(run())


def test_socket_folder_is_created_private(tmp_path: Path) -> None:
    start_and_stop(f"unix://{tmp_path}/new/abci.sock")
    st = os.lstat(tmp_path / "new")
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700
    assert st.st_uid == os.geteuid()


def test_socket_fallback_folder_for_a_long_home_is_ours_and_private(tmp_path: Path) -> None:
    address = resolve_abci_address(tmp_path / ("h" * 120), "unix://data/abci.sock")
    folder = Path(address.removeprefix("unix://")).parent
    assert folder == Path(f"/tmp/loconet-{os.getuid()}")
    start_and_stop(address)
    st = os.lstat(folder)
    assert stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid()
    assert stat.S_IMODE(st.st_mode) & 0o077 == 0


def _symlink(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (folder.parent / "elsewhere").mkdir(mode=0o700)
    folder.symlink_to(folder.parent / "elsewhere")


def _file(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder.write_text("")


def _open_mode(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder.mkdir()
    folder.chmod(0o755)


def _other_user(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """As root, the folder is given to uid 65534; otherwise nobody but root can give a folder
    away, so the check runs as if this process were another user (its effective uid + 1)."""
    folder.mkdir(mode=0o700)
    me = os.geteuid()
    if me == 0:
        os.chown(folder, 65534, 65534)
    else:
        monkeypatch.setattr(os, "geteuid", lambda: me + 1)


@pytest.mark.parametrize(
    "make,says",
    [
        (_symlink, "is a symbolic link"),
        (_file, "is not a folder"),
        (_open_mode, "chmod 700"),
        (_other_user, "belongs to another user (uid {owner})"),
    ],
    ids=["symlink", "file", "mode-0755", "another-user"],
)
def test_socket_fallback_folder_of_another_user_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, make, says: str
) -> None:
    folder = tmp_path / f"loconet-{os.getuid()}"  # as /tmp/loconet-UID, made by someone else
    make(folder, monkeypatch)
    says = says.format(owner=os.lstat(folder).st_uid)
    with pytest.raises(SocketDirError, match=re.escape(says)) as e:
        private_socket_dir(str(folder))
    assert str(folder) in str(e.value)
    with pytest.raises(SocketDirError):
        start_and_stop(f"unix://{folder}/abci.sock")
    assert not os.path.lexists(folder / "abci.sock")  # nothing was bound there


def test_node_with_a_shared_socket_folder_refuses_to_start_in_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    base = free_port_base()
    init_home(home, chain_id="t", ports=Ports(base, base + 1, base + 2, base + 3))
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    (home / "config" / "app.toml").write_text(
        AppConfig(abci_address=f"unix://{shared}/abci.sock").to_toml()
    )
    for command in ("abci", "start"):
        r = subprocess.run(
            [sys.executable, "-m", "node.cli", command, "--home", str(home)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert r.returncode == 1, (command, r.stdout, r.stderr)
        assert "Traceback" not in r.stderr, r.stderr
        assert f"the ABCI socket folder {shared} is open to other users" in r.stderr
        assert f"chmod 700 {shared}" in r.stderr
    assert not (shared / "abci.sock").exists()
