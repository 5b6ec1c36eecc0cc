"""MsgSend: stateless validation and execution."""

from __future__ import annotations

from abci_app.bank import keeper
from abci_app.bank.errors import ErrInvalidAmount, ErrSendToModule
from abci_app.bank.events import transfer_event
from abci_app.bank.keys import MODULE_ACCOUNTS
from abci_app.codec.address import check_address
from abci_app.context import Ctx
from abci_app.encoding import MAX_U64
from abci_app.pb import bank_pb2


def validate_amount(amount: int, what: str = "amount") -> None:
    if amount <= 0 or amount > MAX_U64:
        raise ErrInvalidAmount(f"{what} must be between 1 and 2^64-1 uloco, got {amount}")


def process_msg_send(ctx: Ctx, signer: bytes, msg: bank_pb2.MsgSend) -> None:
    validate_amount(msg.amount)
    to = check_address(msg.to_address, "to_address")
    if to in MODULE_ACCOUNTS:
        raise ErrSendToModule("cannot send to a module account")
    keeper.send(ctx.store, signer, to, msg.amount)
    if ctx.recording:
        ctx.emit(transfer_event(signer, to, msg.amount))
