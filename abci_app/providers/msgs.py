"""MsgRegisterProvider, MsgUpdateProvider, MsgExitProvider: validation and execution.
Each raises a providers error (codes 400..499) or a bank error; a raise changes nothing."""

from __future__ import annotations

import re
from collections.abc import Sequence

from abci_app.bank.msgs import validate_amount
from abci_app.context import Ctx
from abci_app.encoding import MAX_U64
from abci_app.pb import providers_pb2
from abci_app.providers import events, keeper
from abci_app.providers.errors import (
    ErrBondTooSmall,
    ErrInvalidBond,
    ErrInvalidEndpoint,
    ErrInvalidHardware,
    ErrInvalidRegion,
    ErrInvalidThroughput,
    ErrNothingToUpdate,
    ErrProviderExists,
    ErrProviderExiting,
    ErrProviderNotFound,
    ErrTombstoned,
)
from abci_app.providers.params import get_params
from abci_app.validation import is_http_url

_GPU_MODEL = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._+-]{0,63}\Z")  # \Z, not $: no trailing newline
_REGION = re.compile(r"^[a-z0-9][a-z0-9-]{0,31}\Z")
MAX_GPU_COUNT = 1024
MAX_GPU_MEMORY_MIB = 4 * 1024 * 1024


def validate_hardware(hw: Sequence[providers_pb2.GpuSpec], max_entries: int) -> None:
    if not hw:
        raise ErrInvalidHardware(
            "hardware list is empty: give at least one GPU model, count and memory"
        )
    if len(hw) > max_entries:
        raise ErrInvalidHardware(f"hardware list has {len(hw)} entries; the limit is {max_entries}")
    for i, g in enumerate(hw):
        if not _GPU_MODEL.match(g.model):
            raise ErrInvalidHardware(
                f"hardware[{i}].model {g.model!r} must be 1..64 chars [A-Za-z0-9 ._+-]"
            )
        if not 1 <= g.count <= MAX_GPU_COUNT:
            raise ErrInvalidHardware(
                f"hardware[{i}].count must be 1..{MAX_GPU_COUNT}, got {g.count}"
            )
        if not 1 <= g.memory_mib <= MAX_GPU_MEMORY_MIB:
            raise ErrInvalidHardware(
                f"hardware[{i}].memory_mib must be 1..{MAX_GPU_MEMORY_MIB}, got {g.memory_mib}"
            )


def validate_region(region: str) -> None:
    if not _REGION.match(region):
        raise ErrInvalidRegion(f"region {region!r} must be 1..32 chars [a-z0-9-], e.g. eu-west")


def validate_endpoint(url: str) -> None:
    if not is_http_url(url):
        raise ErrInvalidEndpoint(
            f"endpoint {url!r} must be an http(s) URL (http(s)://host[:port][/path], <= 256 bytes)"
        )


def process_msg_register_provider(
    ctx: Ctx, signer: bytes, msg: providers_pb2.MsgRegisterProvider
) -> None:
    params = get_params(ctx.store)
    if keeper.get_provider(ctx.store, signer) is not None:
        raise ErrProviderExists("this address is already a provider: use MsgUpdateProvider")
    if keeper.is_tombstoned(ctx.store, signer):
        raise ErrTombstoned("this address was jailed for proven fraud and can never provide again")
    if msg.bond == 0 or msg.bond > MAX_U64:
        raise ErrInvalidBond("bond must be between 1 and 2^64-1 uloco")
    if msg.bond < params.min_provider_stake:
        raise ErrBondTooSmall(
            f"bond {msg.bond}uloco is below min_provider_stake {params.min_provider_stake}uloco"
        )
    validate_hardware(msg.hardware, params.max_hardware_entries)
    if msg.throughput_tokens_per_sec == 0:
        raise ErrInvalidThroughput("throughput_tokens_per_sec must be > 0")
    validate_region(msg.region)
    validate_endpoint(msg.endpoint)
    p = providers_pb2.Provider(
        address=signer,
        status=keeper.ACTIVE,
        bond=msg.bond,
        reputation=keeper.compute_start_reputation(ctx.store, signer),
        hardware=list(msg.hardware),
        throughput_tokens_per_sec=msg.throughput_tokens_per_sec,
        region=msg.region,
        endpoint=msg.endpoint,
        registered_height=ctx.block.height,
        policy=msg.policy,
    )
    keeper.process_register(ctx.store, p)
    ctx.emit(events.registered(signer, msg.bond, msg.region))


def process_msg_update_provider(
    ctx: Ctx, signer: bytes, msg: providers_pb2.MsgUpdateProvider
) -> None:
    params = get_params(ctx.store)
    p = keeper.get_provider(ctx.store, signer)
    if p is None:
        raise ErrProviderNotFound("this address is not a provider: register first")
    if p.status == keeper.EXITING:
        raise ErrProviderExiting("provider is exiting: its record can no longer change")
    changed = False
    if msg.hardware:
        validate_hardware(msg.hardware, params.max_hardware_entries)
        del p.hardware[:]
        p.hardware.extend(msg.hardware)
        changed = True
    if msg.throughput_tokens_per_sec:
        p.throughput_tokens_per_sec = msg.throughput_tokens_per_sec
        changed = True
    if msg.region:
        validate_region(msg.region)
        p.region = msg.region
        changed = True
    if msg.endpoint:
        validate_endpoint(msg.endpoint)
        p.endpoint = msg.endpoint
        changed = True
    if msg.HasField("policy"):
        p.policy.CopyFrom(msg.policy)
        changed = True
    if msg.add_bond:
        validate_amount(msg.add_bond, "add_bond")
        if p.bond + msg.add_bond > MAX_U64:
            raise ErrInvalidBond("bond would exceed 2^64-1 uloco")
        keeper.increase_bond(ctx.store, p, msg.add_bond)
        changed = True
    if not changed:
        raise ErrNothingToUpdate(
            "nothing to update: set add_bond, hardware, throughput, region, endpoint or policy"
        )
    keeper.set_provider(ctx.store, p)
    ctx.emit(events.updated(signer, p.bond))


def process_msg_exit_provider(ctx: Ctx, signer: bytes, msg: providers_pb2.MsgExitProvider) -> None:
    p = keeper.get_provider(ctx.store, signer)
    if p is None:
        raise ErrProviderNotFound("this address is not a provider")
    if p.status == keeper.EXITING:
        raise ErrProviderExiting(
            f"provider is already exiting (unbonding completes at height {p.unbonding_height})"
        )
    amount = p.bond
    done = keeper.process_exit(ctx.store, p, ctx.block.height)
    ctx.emit(events.exited(signer, amount, done))
