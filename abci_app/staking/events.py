"""Staking events (constant keys; addresses: consensus address upper hex, accounts bech32)."""

from __future__ import annotations

from abci_app.codec.address import to_bech32
from abci_app.context import event
from abci_app.pb import abci


def _v(cons: bytes) -> str:
    return cons.hex().upper()


def validator_created_event(
    cons: bytes, operator: bytes, moniker: str, self_bond: int
) -> abci.Event:
    return event(
        "validator.created",
        validator=_v(cons),
        operator=to_bech32(operator),
        moniker=moniker,
        self_bond=self_bond,
    )


def awaiting_settlement_key_event(cons: bytes, power: int) -> abci.Event:
    """The validator has the stake for ``power`` but stays out of CometBFT's set until its
    operator registers a settlement key (``loconet tx settlement set-key``)."""
    return event("validator.awaiting_settlement_key", validator=_v(cons), power=power)


def bonded_event(cons: bytes, delegator: bytes, amount: int) -> abci.Event:
    return event("stake.bonded", validator=_v(cons), delegator=to_bech32(delegator), amount=amount)


def unbonding_event(
    cons: bytes, delegator: bytes, amount: int, completion_height: int
) -> abci.Event:
    return event(
        "stake.unbonding",
        validator=_v(cons),
        delegator=to_bech32(delegator),
        amount=amount,
        completion_height=completion_height,
    )


def unbonded_event(cons: bytes, delegator: bytes, amount: int) -> abci.Event:
    return event(
        "stake.unbonded", validator=_v(cons), delegator=to_bech32(delegator), amount=amount
    )


def unjailed_event(cons: bytes) -> abci.Event:
    return event("validator.unjailed", validator=_v(cons))


def power_changed_event(cons: bytes, old: int, new: int) -> abci.Event:
    return event("validator.power_changed", validator=_v(cons), old_power=old, new_power=new)


def reward_minted_event(amount: int) -> abci.Event:
    return event("block_reward.minted", amount=amount)


def slashed_event(
    cons: bytes, reason: str, fraction_bps: int, burned: int, infraction_height: int
) -> abci.Event:
    return event(
        "validator.slashed",
        validator=_v(cons),
        reason=reason,
        fraction_bps=fraction_bps,
        burned=burned,
        infraction_height=infraction_height,
    )


def jailed_event(cons: bytes, reason: str, until: int) -> abci.Event:
    return event("validator.jailed", validator=_v(cons), reason=reason, jailed_until=until)


def tombstoned_event(cons: bytes) -> abci.Event:
    return event("validator.tombstoned", validator=_v(cons))
