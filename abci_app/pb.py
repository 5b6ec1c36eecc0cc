"""Generated protobuf stubs (CometBFT v0.38 ABCI types and loconet's own messages).

The stubs are build output of ``make setup`` (grpcio-tools over the pinned cometbft module's
``proto/`` folder, gogoproto and ``proto/``) and live in ``abci_app/codec/gen``. protoc's
Python output uses absolute imports (``from tendermint.types import ...``), so that folder is
put on ``sys.path`` once, here, before anything imports a stub.
"""

from __future__ import annotations

import sys
from pathlib import Path

from google.protobuf.internal.enum_type_wrapper import EnumTypeWrapper

_GEN = Path(__file__).resolve().parent / "codec" / "gen"
if not (_GEN / "tendermint").is_dir():
    raise ImportError(f"protobuf stubs missing in {_GEN}: run `make setup`")
if str(_GEN) not in sys.path:
    sys.path.insert(0, str(_GEN))

from loconet.abci.v1 import vote_extension_pb2
from loconet.bank.v1 import bank_pb2
from loconet.jobs.v1 import jobs_pb2
from loconet.providers.v1 import providers_pb2
from loconet.settlement.v1 import settlement_pb2
from loconet.staking.v1 import staking_pb2
from loconet.state.v1 import state_pb2
from loconet.tx.v1 import tx_pb2
from tendermint.abci import types_pb2 as abci
from tendermint.crypto import keys_pb2, proof_pb2
from tendermint.types import canonical_pb2


def _enum_prefix(enum: EnumTypeWrapper) -> str:
    names = enum.keys()
    common = names[0]
    for n in names[1:]:
        while not n.startswith(common):
            common = common[:-1]
    return common[: common.rfind("_") + 1]


def enum_name(enum: EnumTypeWrapper, value: int) -> str:
    """The name of a proto enum value as queries, events and messages show it: lower case,
    without the enum's common prefix (``enum_name(jobs_pb2.Phase, 1) == "commit"``);
    ``"unknown"`` for a value the enum does not define."""
    try:
        name: str = enum.Name(value)
    except ValueError:
        return "unknown"
    return name.removeprefix(_enum_prefix(enum)).lower()


def enum_names(enum: EnumTypeWrapper) -> list[str]:
    """Every name ``enum_name`` can return for ``enum`` (besides "unknown"), in value order."""
    return [enum_name(enum, v) for v in sorted(enum.values())]


__all__ = [
    "abci",
    "canonical_pb2",
    "bank_pb2",
    "enum_name",
    "enum_names",
    "jobs_pb2",
    "keys_pb2",
    "proof_pb2",
    "providers_pb2",
    "settlement_pb2",
    "staking_pb2",
    "state_pb2",
    "tx_pb2",
    "vote_extension_pb2",
]
