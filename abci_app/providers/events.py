"""providers events (constant keys; emitted after the change)."""

from abci_app.codec.address import to_bech32
from abci_app.context import event
from abci_app.pb import abci


def registered(addr: bytes, bond: int, region: str) -> abci.Event:
    return event("provider.registered", provider=to_bech32(addr), bond=bond, region=region)


def updated(addr: bytes, bond: int) -> abci.Event:
    return event("provider.updated", provider=to_bech32(addr), bond=bond)


def exited(addr: bytes, amount: int, unbonding_height: int) -> abci.Event:
    return event(
        "provider.exited",
        provider=to_bech32(addr),
        amount=amount,
        unbonding_height=unbonding_height,
    )


def unbonded(addr: bytes, amount: int) -> abci.Event:
    return event("provider.unbonded", provider=to_bech32(addr), amount=amount)


def slashed(
    addr: bytes, amount: int, reason: str, burned: int, job_id: int, round_: int
) -> abci.Event:
    return event(
        "provider.slashed",
        provider=to_bech32(addr),
        amount=amount,
        reason=reason,
        burned=burned,
        job_id=job_id,
        round=round_,
    )


def jailed(addr: bytes, reason: str) -> abci.Event:
    return event("provider.jailed", provider=to_bech32(addr), reason=reason)
