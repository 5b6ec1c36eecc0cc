from abci_app.codec.address import to_bech32
from abci_app.context import event
from abci_app.pb import abci


def transfer_event(sender: bytes, recipient: bytes, amount: int) -> abci.Event:
    return event(
        "transfer", sender=to_bech32(sender), recipient=to_bech32(recipient), amount=amount
    )


def fee_paid_event(validator_operator: bytes, amount: int) -> abci.Event:
    return event("fee.distributed", recipient=to_bech32(validator_operator), amount=amount)
