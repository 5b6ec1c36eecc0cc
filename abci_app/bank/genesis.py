"""bank genesis: ``{"balances": [{"address": "loco1...", "amount": "1000000000000"}]}``."""

from __future__ import annotations

from typing import Any

from abci_app.bank import keeper
from abci_app.codec.address import from_bech32
from abci_app.store import CacheKV


def parse_amount(v: Any, what: str) -> int:
    """Amounts in JSON are decimal strings (or ints); no floats, no signs."""
    if isinstance(v, bool) or not isinstance(v, (int, str)):
        raise ValueError(f"{what}: amount must be a decimal string, got {v!r}")  # noqa: TRY004 (genesis errors are ValueError)
    s = str(v)
    if not (s.isascii() and s.isdigit()):  # "١٢" (non-ASCII digits) was read as 12
        raise ValueError(f"{what}: amount must be a non-negative decimal integer, got {v!r}")
    return int(s)


def init_genesis(store: CacheKV, state: dict[str, Any]) -> None:
    seen: set[bytes] = set()
    for i, entry in enumerate(state.get("balances", [])):
        addr = from_bech32(entry["address"])
        if addr in seen:
            raise ValueError(f"bank.balances[{i}]: duplicate address {entry['address']}")
        seen.add(addr)
        amount = parse_amount(entry["amount"], f"bank.balances[{i}]")
        if amount:
            keeper.mint(store, addr, amount)
