"""What a round asks of a provider's machine: an island that holds the model, and the speed the
owner stated (README *Islands and measured speed*). Integers only.

Island memory: a provider's registered hardware is one island (the devices a pipeline-parallel
worker spans), ``sum(count x memory_mib)`` over its ``GpuSpec`` entries. A round needs at least
the training state of the job's model: ``BYTES_PER_PARAM`` bytes per parameter (float32
weights, gradients, AdamW's two moments, the round's base and the error-feedback residual: the
six copies the worker holds, node/worker ``training_memory_bytes``), parameters counted as the
providers' policy counts them (``incentives.compute_model_params``). Activations are left out:
micro-batching and checkpointing shrink them, so this is a floor the chain can check (a
necessary condition); the worker's own feasibility check is the finer one.

Speed: a job that states ``compute_s_per_round`` needs ``ceil(H x tokens_per_step /
compute_s_per_round)`` tokens/s; the draw seats, as participants and as judges, only providers
that meet it (the providers keeper's ``meets_throughput``: the measured figure once there is
one, else the provider's own claim, so a new provider gets the round that measures it and an
honest machine is never seated above its own claim).

Measured speed: an accepted commitment trained ``tokens_processed`` tokens between its round's
open block and the block that took it (header times, consensus data), so its sample is
``tokens x 10^9 // elapsed_ns``. The header times include any time the chain itself made no
block (an upgrade, an outage, or validators with more than 1/3 of the power withholding votes,
which costs them nothing), which is not the provider's: a round whose blocks from the open to a
commitment came more than the jobs param ``max_block_gap_ns`` (default ``MAX_BLOCK_GAP_NS``, 30 s)
apart on average gives no sample of that commitment (``is_chain_live``), neither raising nor
lowering the figure.
"""

from __future__ import annotations

from abci_app.jobs.incentives import ceil_div, compute_model_params
from abci_app.jobs.params import DEFAULTS
from abci_app.pb import jobs_pb2, providers_pb2

BYTES_PER_PARAM = 24
MIB = 1 << 20
NS_PER_S = 10**9
# the default of the jobs param ``max_block_gap_ns`` (30 s): a mean block interval above it between
# a round's open and a commitment is a chain stall, not a slow provider: 5x CometBFT's default
# (~6 s with timeout_commit 5 s), 30x the testnet's. Also what a chain whose stored params predate
# the param (0 there) uses.
MAX_BLOCK_GAP_NS = DEFAULTS["max_block_gap_ns"]

# why a round waits (event ``round.waiting``, attribute ``reason``)
WAIT_NONE = "no eligible providers"
WAIT_MEMORY = "no island holds the model"
WAIT_SPEED = "no provider fast enough"


def compute_island_need_mib(spec: jobs_pb2.JobSpec) -> int:
    """MiB of island memory a round of ``spec`` needs at least (its training state)."""
    return ceil_div(compute_model_params(spec.model) * BYTES_PER_PARAM, MIB)


def compute_island_mib(p: providers_pb2.Provider) -> int:
    """A provider's island: every device it registered, ``sum(count x memory_mib)``."""
    return sum(g.count * g.memory_mib for g in p.hardware)


def can_hold(p: providers_pb2.Provider, spec: jobs_pb2.JobSpec) -> bool:
    return compute_island_mib(p) >= compute_island_need_mib(spec)


def compute_speed_need(spec: jobs_pb2.JobSpec) -> int:
    """Tokens/s a job that states its training time per round asks of a participant (0: none)."""
    if not spec.compute_s_per_round:
        return 0
    return ceil_div(spec.inner_steps * spec.tokens_per_step, spec.compute_s_per_round)


def compute_speed_sample(tokens: int, open_time_ns: int, commit_time_ns: int) -> int:
    """Tokens/s of one commitment: its tokens over the time from the round's open to its commit
    (at least 1 ns: header times strictly increase, a commit lands after the open block)."""
    return tokens * NS_PER_S // max(1, commit_time_ns - open_time_ns)


def is_chain_live(
    open_height: int, open_time_ns: int, height: int, time_ns: int, max_gap_ns: int
) -> bool:
    """The chain made blocks at its usual pace from a round's open to a block taking a
    commitment: at most ``max_gap_ns`` (the jobs param ``max_block_gap_ns``; 0, a chain's params
    stored before it existed, reads as ``MAX_BLOCK_GAP_NS``) per block on average."""
    gap = max_gap_ns or MAX_BLOCK_GAP_NS
    return time_ns - open_time_ns <= max(1, height - open_height) * gap
