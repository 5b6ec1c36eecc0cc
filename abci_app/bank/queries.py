from __future__ import annotations

from abci_app.auth.keeper import get_account
from abci_app.auth.keys import account_key
from abci_app.bank import keeper
from abci_app.bank.keys import SUPPLY_KEY, balance_key
from abci_app.codec.address import from_bech32, to_bech32
from abci_app.querying import QueryError, to_json
from abci_app.store import KVReader


def query_account(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/account/{loco1...} -> {"address", "balance", "sequence"}"""
    if len(args) != 1:
        raise QueryError("usage: /account/{loco1...}")
    addr = from_bech32(args[0])
    data = {
        "address": to_bech32(addr),
        "balance": keeper.get_balance(reader, addr),
        "sequence": get_account(reader, addr).sequence,
    }
    return to_json(data), [balance_key(addr), account_key(addr)]


def query_supply(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    """/supply -> {"supply"}"""
    if args:
        raise QueryError("usage: /supply")
    return to_json({"supply": keeper.get_supply(reader)}), [SUPPLY_KEY]


QUERIES = {"account": query_account, "supply": query_supply}
