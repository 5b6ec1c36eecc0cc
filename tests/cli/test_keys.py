"""Every key builder in every module's keys.py has a ``parse_*`` next to it that reads the key
back (no keeper slices keys by hand), and a key that does not match its layout is refused."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from types import ModuleType
from typing import Any

import pytest

import abci_app
from abci_app.encoding import KeyReader, decode_lp, lp
from abci_app.errors import InvariantBroken


def _keys_modules() -> list[ModuleType]:
    mods = []
    for info in pkgutil.iter_modules(abci_app.__path__):
        if info.ispkg:
            try:
                mods.append(importlib.import_module(f"abci_app.{info.name}.keys"))
            except ModuleNotFoundError:
                continue
    return mods


def _builders() -> list[tuple[str, Any, Any]]:
    """(name, builder, parser) for every ``*_key`` function defined in a keys.py."""
    out = []
    for mod in _keys_modules():
        for name, fn in inspect.getmembers(mod, inspect.isfunction):
            if (
                fn.__module__ == mod.__name__
                and name.endswith("_key")
                and not name.startswith("parse_")
            ):
                out.append((f"{mod.__name__}.{name}", fn, getattr(mod, f"parse_{name}", None)))
    return out


SAMPLES: dict[type, list[Any]] = {
    int: [0, 7, 2**40 + 3, 2**64 - 1],
    bytes: [bytes(range(20)), b"\xff" * 32, b"\x00"],
}


def test_every_module_has_keys_and_builders() -> None:
    names = {m.__name__ for m in _keys_modules()}
    for module in ("auth", "bank", "jobs", "providers", "slashing", "staking"):
        assert f"abci_app.{module}.keys" in names
    assert len(_builders()) >= 16  # discovery finds every builder


@pytest.mark.parametrize("name,build,parse", _builders(), ids=[b[0] for b in _builders()])
def test_parse_inverts_builder(name: str, build: Any, parse: Any) -> None:
    assert parse is not None, f"{name} has no parse_{name.rsplit('.', 1)[1]} next to it"
    hints = typing.get_type_hints(build)
    kinds = [hints[p] for p in inspect.signature(build).parameters]
    for i in range(4):
        args = tuple(SAMPLES[k][(i + j) % len(SAMPLES[k])] for j, k in enumerate(kinds))
        key = build(*args)
        got = parse(key)
        assert (got if isinstance(got, tuple) else (got,)) == args
        with pytest.raises(InvariantBroken):
            parse(key + b"\x00")  # longer than its layout
        with pytest.raises(InvariantBroken):
            parse(key[:-1])  # shorter than its layout
        with pytest.raises(InvariantBroken):
            parse(bytes([key[0] ^ 0x80]) + key[1:])  # another module's prefix


def test_key_reader_and_decode_lp() -> None:
    r = KeyReader(b"\x07" + (5).to_bytes(8, "big") + lp(b"ab"), b"\x07")
    assert (r.u64(), r.lp()) == (5, b"ab")
    r.end()
    assert decode_lp(lp(b"xyz")) == b"xyz"
    with pytest.raises(InvariantBroken):
        decode_lp(lp(b"xyz") + b"!")
