"""A file keyring: ``HOME/keyring/NAME.json`` holds an ed25519 seed, written with mode 0600.

Keys are stored unencrypted (like ``--keyring-backend test`` in the Cosmos SDK): this is a
development keyring for local nodes and testnets, and the README says so."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from abci_app.codec.address import to_bech32
from abci_app.codec.tx import Ed25519Signer

NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")


class KeyError_(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    signer: Ed25519Signer

    @property
    def address(self) -> str:
        return to_bech32(self.signer.address)

    @property
    def address_bytes(self) -> bytes:
        return self.signer.address


class Keyring:
    def __init__(self, home: Path) -> None:
        self.dir = Path(home) / "keyring"

    def _path(self, name: str) -> Path:
        if not NAME_RE.match(name):
            raise KeyError_(f"invalid key name {name!r}: use letters, digits, '.', '_' or '-'")
        return self.dir / f"{name}.json"

    def add(self, name: str, seed: bytes | None = None) -> Key:
        path = self._path(name)
        if path.exists():
            raise KeyError_(f"key {name!r} already exists in {self.dir}: pick another name")
        signer = Ed25519Signer(seed) if seed is not None else Ed25519Signer.generate()
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        body = json.dumps(
            {"name": name, "type": "ed25519", "address": to_bech32(signer.address),
             "public_key": signer.public_bytes().hex(), "seed": signer.seed.hex()},
            indent=2,
        )
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(body + "\n")
        return Key(name, signer)

    def get(self, name: str) -> Key:
        path = self._path(name)
        if not path.exists():
            known = ", ".join(self.names()) or "none"
            raise KeyError_(f"no key named {name!r} in {self.dir} (known: {known}); add it with `loconet keys add {name} --home ...`")
        data = json.loads(path.read_text())
        return Key(name, Ed25519Signer(bytes.fromhex(data["seed"])))

    def names(self) -> list[str]:
        if not self.dir.is_dir():
            return []
        return sorted(p.stem for p in self.dir.glob("*.json"))

    def list(self) -> list[Key]:
        return [self.get(n) for n in self.names()]
