"""Generated protobuf stubs (CometBFT v0.38 ABCI types and loconet's own messages).

The stubs are build output of ``make setup`` (grpcio-tools over the pinned cometbft module's
``proto/`` folder, gogoproto and ``proto/``) and live in ``abci_app/codec/gen``. protoc's
Python output uses absolute imports (``from tendermint.types import ...``), so that folder is
put on ``sys.path`` once, here, before anything imports a stub.
"""

from __future__ import annotations

import sys
from pathlib import Path

_GEN = Path(__file__).resolve().parent / "codec" / "gen"
if not (_GEN / "tendermint").is_dir():
    raise ImportError(f"protobuf stubs missing in {_GEN}: run `make setup`")
if str(_GEN) not in sys.path:
    sys.path.insert(0, str(_GEN))

from loconet.bank.v1 import bank_pb2
from loconet.jobs.v1 import jobs_pb2
from loconet.providers.v1 import providers_pb2
from loconet.staking.v1 import staking_pb2
from loconet.state.v1 import state_pb2
from loconet.tx.v1 import tx_pb2
from tendermint.abci import types_pb2 as abci
from tendermint.crypto import keys_pb2, proof_pb2

__all__ = [
    "abci", "bank_pb2", "jobs_pb2", "keys_pb2", "proof_pb2", "providers_pb2", "staking_pb2", "state_pb2", "tx_pb2",
]
