"""Slashing queries: ``/signing_info/{HEX consensus address}`` (params are under ``/params``)."""

from __future__ import annotations

from abci_app.querying import QueryError, to_json
from abci_app.slashing.keeper import compute_max_missed, get_signing_info
from abci_app.slashing.keys import signing_info_key
from abci_app.slashing.params import get_params
from abci_app.store import KVReader


def query_signing_info(
    reader: KVReader, args: list[str], params: dict[str, str]
) -> tuple[bytes, list[bytes]]:
    if len(args) != 1:
        raise QueryError("usage: /signing_info/{consensus address, 40 hex characters}")
    try:
        cons = bytes.fromhex(args[0])
    except ValueError:
        raise QueryError(f"{args[0]!r} is not a hex consensus address") from None
    if len(cons) != 20:
        raise QueryError("a consensus address is 20 bytes (40 hex characters)")
    info = get_signing_info(reader, cons)
    p = get_params(reader)
    data = {
        "address": cons.hex().upper(),
        "start_height": info.start_height if info else 0,
        "index_offset": info.index_offset if info else 0,
        "missed_blocks_counter": info.missed_blocks_counter if info else 0,
        "max_missed": compute_max_missed(p.signed_blocks_window, p.min_signed_per_window_bps),
        "window": p.signed_blocks_window,
    }
    return to_json(data), [signing_info_key(cons)]


QUERIES = {"signing_info": query_signing_info}
