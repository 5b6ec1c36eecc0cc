"""MsgSetSettlementKey, MsgWithdrawToEvm, MsgSignCheckpoint, MsgReportForgedCheckpoint:
validation and execution.
Each raises a settlement error (codes 700..799) or a bank error; a raise changes nothing."""

from __future__ import annotations

from abci_app.bank.msgs import validate_amount
from abci_app.context import Ctx
from abci_app.encoding import U128
from abci_app.pb import settlement_pb2
from abci_app.settlement import events, evm, keeper
from abci_app.settlement.errors import (
    ErrInvalidEvmAddress,
    ErrInvalidKeyProof,
    ErrInvalidWithdrawal,
    ErrKeyInUse,
    ErrNotOperator,
    ErrValidatorNotFound,
)
from abci_app.settlement.expected_keepers import StakingKeeper

MAX_U128 = (1 << (8 * U128)) - 1


def validate_evm_address(a: bytes, what: str = "evm_address") -> None:
    if len(a) != 20:
        raise ErrInvalidEvmAddress(
            f"{what} must be 20 bytes (0x followed by 40 hex digits), got {len(a)}"
        )
    if a == bytes(20):
        raise ErrInvalidEvmAddress(f"{what} is the zero address: nobody could claim it")


def new_set_settlement_key(staking: StakingKeeper):
    def process_msg_set_settlement_key(
        ctx: Ctx, signer: bytes, msg: settlement_pb2.MsgSetSettlementKey
    ) -> None:
        validate_evm_address(msg.evm_address)
        v = staking.get_validator(ctx.store, msg.validator) if len(msg.validator) == 20 else None
        if v is None:
            raise ErrValidatorNotFound(
                f"no validator with consensus address {msg.validator.hex().upper()}: run "
                "`loconet tx staking create-validator` first, then set its key (or put both "
                "messages in one transaction, create-validator first)"
            )
        if v.operator != signer:
            raise ErrNotOperator("only the validator's operator may set its settlement key")
        proof = keeper.key_proof_digest(ctx.block.chain_id, msg.validator)
        if evm.recover(proof, msg.signature) != msg.evm_address:
            raise ErrInvalidKeyProof(
                "signature is not the settlement key's own (low-s, 65 bytes r||s||v) over "
                "keccak256('loconet/settlement-key/v1' 0x00 chain_id 0x00 validator)"
            )
        owner = keeper.get_key_owner(ctx.store, msg.evm_address)
        if owner is not None and owner != msg.validator:
            raise ErrKeyInUse(
                f"EVM address 0x{msg.evm_address.hex()} is the settlement key of another validator"
            )
        keeper.set_settlement_key(ctx.store, msg.validator, msg.evm_address)
        ctx.emit(events.key_set(msg.validator, msg.evm_address))

    return process_msg_set_settlement_key


def process_msg_withdraw_to_evm(
    ctx: Ctx, signer: bytes, msg: settlement_pb2.MsgWithdrawToEvm
) -> None:
    validate_evm_address(msg.evm_address)
    validate_amount(msg.amount)
    if keeper.get_cumulative(ctx.store, msg.evm_address) + msg.amount > MAX_U128:
        raise ErrInvalidWithdrawal("cumulative withdrawals to this address would overflow")
    total = keeper.process_withdraw(ctx.store, signer, msg.evm_address, msg.amount)
    ctx.emit(events.withdrawn(signer, msg.evm_address, msg.amount, total))


def process_msg_sign_checkpoint(
    ctx: Ctx, signer: bytes, msg: settlement_pb2.MsgSignCheckpoint
) -> None:
    keeper.process_sign_checkpoint(ctx, msg.number, msg.signature)


def new_report_forged_checkpoint(staking: StakingKeeper):
    def process_msg_report_forged_checkpoint(
        ctx: Ctx, signer: bytes, msg: settlement_pb2.MsgReportForgedCheckpoint
    ) -> None:
        keeper.process_forged_checkpoint(ctx, staking, msg)

    return process_msg_report_forged_checkpoint
