from __future__ import annotations

import base64

from abci_app.codec.address import to_bech32
from abci_app.querying import to_json
from abci_app.staking import keeper
from abci_app.staking.keys import validator_key
from abci_app.store import KVReader


def query_validators(reader: KVReader, args: list[str], params: dict[str, str]) -> tuple[bytes, list[bytes]]:
    """/validators -> [{"address", "pub_key", "operator", "power", "moniker"}]"""
    out, keys = [], []
    for cons, v in keeper.iterate_validators(reader):
        out.append({"address": cons.hex().upper(), "pub_key": base64.b64encode(v.pub_key).decode(),
                    "operator": to_bech32(v.operator), "power": v.power, "moniker": v.moniker})
        keys.append(validator_key(cons))
    return to_json(out), keys


QUERIES = {"validators": query_validators}
