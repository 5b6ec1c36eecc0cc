"""Balances and supply. Mutators keep ``sum(balances) == supply`` (checked by
``check_invariants``)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from abci_app.bank.errors import ErrInsufficientFunds
from abci_app.bank.keys import BALANCE_PREFIX, SUPPLY_KEY, balance_key, parse_balance_key
from abci_app.codec.address import to_bech32
from abci_app.encoding import decode_amount, encode_amount, prefix_end
from abci_app.errors import InvariantBroken
from abci_app.store import CacheKV, KVReader


def get_balance(store: KVReader, address: bytes) -> int:
    return decode_amount(store.get(balance_key(address)))


def get_supply(store: KVReader) -> int:
    return decode_amount(store.get(SUPPLY_KEY))


def _set_balance(store: CacheKV, address: bytes, amount: int) -> None:
    if amount == 0:
        store.delete(balance_key(address))
    else:
        store.set(balance_key(address), encode_amount(amount))


def increase_balance(store: CacheKV, address: bytes, amount: int) -> None:
    _set_balance(store, address, get_balance(store, address) + amount)


def decrease_balance(store: CacheKV, address: bytes, amount: int) -> None:
    have = get_balance(store, address)
    if have < amount:
        raise ErrInsufficientFunds(
            f"insufficient funds: {to_bech32(address)} has {have}uloco, needs {amount}uloco"
        )
    _set_balance(store, address, have - amount)


def send(store: CacheKV, sender: bytes, recipient: bytes, amount: int) -> None:
    decrease_balance(store, sender, amount)
    increase_balance(store, recipient, amount)


def mint(store: CacheKV, address: bytes, amount: int) -> None:
    increase_balance(store, address, amount)
    store.set(SUPPLY_KEY, encode_amount(get_supply(store) + amount))


def burn(store: CacheKV, address: bytes, amount: int) -> None:
    decrease_balance(store, address, amount)
    store.set(SUPPLY_KEY, encode_amount(get_supply(store) - amount))


def iterate_balances(store: KVReader) -> Iterator[tuple[bytes, int]]:
    for k, v in store.iterate(BALANCE_PREFIX, prefix_end(BALANCE_PREFIX)):
        yield parse_balance_key(k), decode_amount(v)


def split_pro_rata(total: int, weights: Iterable[tuple[bytes, int]]) -> list[tuple[bytes, int]]:
    """Split ``total`` by integer weights: each share is floor(total*w/W) (payouts truncate);
    the dust left over goes, one uloco each, to the largest weights first (ties: lower address
    first). Deterministic, and the shares always sum to ``total``."""
    ws = sorted(weights)
    wsum = sum(w for _, w in ws)
    if total == 0 or wsum == 0:
        return []
    shares = {a: total * w // wsum for a, w in ws}
    dust = total - sum(shares.values())
    for a, _ in sorted(ws, key=lambda aw: (-aw[1], aw[0]))[:dust]:
        shares[a] += 1
    return [(a, s) for a, s in sorted(shares.items()) if s > 0]


def check_invariants(store: KVReader, extra_holdings: int = 0) -> None:
    """sum(balances) + tokens held outside balances (bonds, escrow; given by other modules)
    == supply, and no balance is zero-stored or negative. Raises InvariantBroken."""
    total = 0
    for addr, amount in iterate_balances(store):
        if amount <= 0:
            raise InvariantBroken(f"non-positive stored balance for {addr.hex()}")
        total += amount
    supply = get_supply(store)
    if total + extra_holdings != supply:
        raise InvariantBroken(
            f"supply invariant broken: balances {total} + held {extra_holdings} != supply {supply}"
        )
