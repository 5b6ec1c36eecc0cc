"""Fixtures for the blob exchange: stores in tmp_path, the real aiohttp blob server on loopback,
misbehaving peers (tests/kits/blobkit.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from node.blobs import BlobServer, BlobStore
from tests.kits.blobkit import Peers


@pytest.fixture
def peers() -> Iterator[Peers]:
    p = Peers()
    yield p
    p.close()


@pytest.fixture
def make_store(tmp_path: Path) -> Iterator[Callable[..., BlobStore]]:
    stores: list[BlobStore] = []

    def make(name: str = "store", quota: int | None = 1 << 30, **kw: object) -> BlobStore:
        s = BlobStore(tmp_path / name, quota, **kw)  # type: ignore[arg-type]
        stores.append(s)
        return s

    yield make
    for s in stores:
        s.close()


@pytest.fixture
def served(make_store: Callable[..., BlobStore]) -> Iterator[tuple[BlobStore, BlobServer]]:
    """A store served by the real blob server on a free loopback port."""
    store = make_store("served")
    with BlobServer(store, "127.0.0.1", 0) as server:
        yield store, server
