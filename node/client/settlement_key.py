"""A validator's settlement key: the secp256k1 key its node signs checkpoints with in ExtendVote.

HOME/config/settlement_key.json (mode 0600, like priv_validator_key.json)::

    {"evm_address": "0x...", "secret": "<64 hex>"}

``loconet init`` and ``loconet testnet`` create one per validator and register its address in
the genesis (``settlement.keys``); a validator created later registers with
``loconet tx settlement set-key``. The node hands the secret to the app (ExtensionKeys)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from abci_app.settlement import evm
from node.atomic import write_new_atomic

FILE = Path("config") / "settlement_key.json"


def path(home: Path) -> Path:
    return Path(home) / FILE


def create(home: Path) -> str:
    """Write a new key (refuses to overwrite); return its 0x address."""
    p = path(home)
    if p.exists():
        raise FileExistsError(f"{p} exists: a settlement key is never overwritten")
    secret = os.urandom(32)
    while not 0 < int.from_bytes(secret, "big") < evm.SECP256K1_N:
        secret = os.urandom(32)
    addr = "0x" + evm.address_of_private_key(secret).hex()
    p.parent.mkdir(parents=True, exist_ok=True)
    body = json.dumps({"evm_address": addr, "secret": secret.hex()}, indent=1, sort_keys=True)
    write_new_atomic(p, body + "\n", 0o600)  # never half a key under the file's name
    return addr


def load(home: Path) -> bytes | None:
    """The secret, or None when the home has no settlement key."""
    p = path(home)
    if not p.exists():
        return None
    try:
        secret = bytes.fromhex(json.loads(p.read_text())["secret"])
    except (ValueError, KeyError, TypeError, RecursionError) as e:
        raise ValueError(
            f"{p}: not a settlement key file ({e}); move it away to start without one"
        ) from None
    if len(secret) != 32:
        raise ValueError(f"{p}: the secret must be 32 bytes of hex")
    return secret


def address(home: Path) -> str | None:
    secret = load(home)
    return None if secret is None else "0x" + evm.address_of_private_key(secret).hex()
