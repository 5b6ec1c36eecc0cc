"""settlement events (constant keys; emitted after the change)."""

from abci_app.codec.address import to_bech32
from abci_app.context import event
from abci_app.pb import abci


def key_set(validator: bytes, evm_address: bytes) -> abci.Event:
    return event("settlement.key_set", validator=validator, evm_address=evm_address)


def withdrawn(sender: bytes, evm_address: bytes, amount: int, cumulative: int) -> abci.Event:
    return event(
        "settlement.withdrawn",
        sender=to_bech32(sender),
        evm_address=evm_address,
        amount=amount,
        cumulative=cumulative,
    )


def checkpoint_created(
    number: int, height: int, rewards_root: bytes, next_set_hash: bytes
) -> abci.Event:
    return event(
        "settlement.checkpoint_created",
        number=number,
        height=height,
        rewards_root=rewards_root,
        next_set_hash=next_set_hash,
    )


def checkpoint_signed(
    number: int, signer: bytes, signed_power: int, total_power: int
) -> abci.Event:
    return event(
        "settlement.checkpoint_signed",
        number=number,
        signer=signer,
        signed_power=signed_power,
        total_power=total_power,
    )


def checkpoint_final(number: int, height: int) -> abci.Event:
    return event("settlement.checkpoint_final", number=number, height=height)


def forged_checkpoint_slashed(validator: bytes, number: int, digest: bytes) -> abci.Event:
    return event(
        "settlement.forged_checkpoint_slashed", validator=validator, number=number, digest=digest
    )
