"""The token's units: every amount on the chain is an integer of uloco, 1 LOCO = 10^6 uloco."""

from __future__ import annotations

ULOCO = 1_000_000


def fmt_loco(uloco: int) -> str:
    whole, frac = divmod(uloco, ULOCO)
    return f"{whole}.{frac:06d}".rstrip("0").rstrip(".") + " LOCO"
