"""One exception tree for everything a transaction can get wrong.

Each class has a stable numeric ``code`` (the ABCI ``code`` of the tx result, never reused)
and a ``codespace`` (the module that owns it). CheckTx, ProcessProposal and FinalizeBlock all
raise these; the ABCI layer turns them into ``ExecTxResult(code, codespace, log)``.

    LoconetError
    ├── TxError            (codespace "tx": envelope, signature, sequence, fee)
    │   ├── ErrTxDecode, ErrTxTooLarge, ErrInvalidSignature, ErrWrongChainId,
    │   ├── ErrWrongSequence, ErrInvalidPubKey, ErrEmptyTx, ErrUnknownMessage,
    │   ├── ErrMemoTooLong, ErrTxTimeout, ErrInvalidFee, ErrInsufficientFee, ErrInvalidAddress
    │   └── ErrInternal (a handler bug a tx reached: the tx fails, the chain goes on)
    └── module errors      (codespace = module name, e.g. "bank"), defined in <module>/errors.py

Codes 1..99 belong to the tx envelope; each module takes a block of 100 (bank 100..199,
staking 200.., slashing 300.., providers 400.., jobs 500..).
"""

from __future__ import annotations

from typing import ClassVar


class LoconetError(Exception):
    code: ClassVar[int] = 1
    codespace: ClassVar[str] = "loconet"

    def __init__(self, log: str) -> None:
        super().__init__(log)
        self.log = log


class GenesisError(ValueError):
    """The genesis app_state is not one loconet can start from; the message names the field.
    InitChain halts on it (a chain cannot start from a state it cannot read), without a
    traceback."""


class InvariantBroken(Exception):
    """A state invariant does not hold: the node must halt, never continue."""


class TxError(LoconetError):
    codespace = "tx"


class ErrTxDecode(TxError):
    code = 2


class ErrTxTooLarge(TxError):
    code = 3


class ErrInvalidSignature(TxError):
    code = 4


class ErrWrongChainId(TxError):
    code = 5


class ErrWrongSequence(TxError):
    code = 6


class ErrInvalidPubKey(TxError):
    code = 7


class ErrEmptyTx(TxError):
    code = 8


class ErrUnknownMessage(TxError):
    code = 9


class ErrMemoTooLong(TxError):
    code = 10


class ErrTxTimeout(TxError):
    code = 11


class ErrInvalidFee(TxError):
    code = 12


class ErrInsufficientFee(TxError):
    code = 13


class ErrInvalidAddress(TxError):
    code = 14


class ErrInternal(TxError):
    """A message handler raised something other than a LoconetError (a bug a tx can reach, e.g.
    protobuf's ValueError on a uint64 overflow). The tx fails with its writes dropped, as the
    Cosmos SDK recovers a panic in runTx, instead of FinalizeBlock raising and halting the node."""

    code = 15
