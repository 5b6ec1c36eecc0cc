"""Message routing: oneof field name of ``loconet.tx.v1.Msg`` -> handler(ctx, signer, msg).

A module registers its handlers here; the codec rejects a Msg with no known type before
routing, so an entry missing here is a programming error (tested)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from abci_app.bank.msgs import process_msg_send
from abci_app.context import Ctx

Handler = Callable[[Ctx, bytes, Any], None]

ROUTES: dict[str, Handler] = {
    "send": process_msg_send,
}
