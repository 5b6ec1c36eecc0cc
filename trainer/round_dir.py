"""The ``--round DIR`` driver that the two island trainers share (trainer/ddp.py, a
data-parallel island; trainer/pipeline.py, a pipeline of stages): one worker round read from a
directory, trained by every rank, written back by rank 0.

The directory is the contract with ``loconet provider run --procs N [--pipeline S]``
(node/worker/ml.py:train_island), which writes it, starts ``torchrun -m trainer.ddp|pipeline
--round DIR`` and reads the result back:

* DIR/round.json: the job's model and inner configs, the shard spec, H, k, the codec's name,
  the binding (provider, job, round, base model hash), the corpus file, ``poison`` (the worker's
  test behaviour: Δ scaled) and ``microbatches`` (read by the pipeline only);
* DIR/base.model: the round's base model bytes;
* DIR/out/, written by rank 0: ``state00000``, ``state00001``, ... (the trace's states),
  ``payload`` and ``result.json`` (``world``, the island's shape where it has one, ``losses``,
  ``trace``, ``payload_sha256``, ``model_hash``).

Both trainers read and write it here, so the two islands cannot drift apart on what the worker
hands them or on what it reads back.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.carry import carry_bytes, carry_hash
from trainer.commit import Binding, encode, trace_root, update_root
from trainer.compression import Codec, CompressionState, make_codec
from trainer.data import Corpus, ShardSpec
from trainer.diloco import RoundArtifacts
from trainer.model import GPTConfig
from trainer.state import InnerConfig, state_hash


def init_group(device_flag: str) -> str:
    """Join the island's process group as torchrun started this rank: NCCL with the rank on
    ``cuda:LOCAL_RANK`` for ``--device cuda``, gloo on the CPU otherwise. Returns this rank's
    device."""
    cuda = device_flag.startswith("cuda")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    device = f"cuda:{local}" if cuda else "cpu"
    if cuda:
        torch.cuda.set_device(local)
    dist.init_process_group("nccl" if cuda else "gloo")
    return device


@dataclass(frozen=True, slots=True)
class RoundJob:
    """One worker round as DIR/round.json describes it (the corpus already loaded and checked
    against the spec). The base model stays on disk until a trainer asks for it: the pipeline's
    ranks keep only their stage's share of it."""

    dir: Path
    cfg: GPTConfig
    icfg: InnerConfig
    spec: ShardSpec
    binding: Binding
    corpus: Corpus
    H: int
    k: int
    codec: Codec
    poison: float
    microbatches: int  # 0 where round.json names none (the data-parallel island needs none)

    def base_bytes(self) -> bytes:
        return (self.dir / "base.model").read_bytes()


def read_round(d: Path) -> RoundJob:
    """DIR/round.json as a ``RoundJob``; a corpus that is not the spec's dataset is refused
    before any rank trains on it."""
    job = json.loads((d / "round.json").read_text())
    spec = ShardSpec.from_dict(job["spec"])
    b = job["binding"]
    binding = Binding(
        bytes.fromhex(b["provider"]), int(b["job"]), int(b["round"]), bytes.fromhex(b["base"])
    )
    corpus = Corpus.from_file(job["corpus"])
    if corpus.id != spec.dataset_id:
        raise ValueError(
            f"corpus {corpus.id[:12]} is not the spec's dataset {spec.dataset_id[:12]}"
        )
    H, k = int(job["H"]), int(job["k"])
    if H % k:
        raise ValueError(f"H = {H} must be a multiple of k = {k}")
    return RoundJob(
        dir=d,
        cfg=GPTConfig.from_dict(job["model"]),
        icfg=InnerConfig(**job["inner"]),
        spec=spec,
        binding=binding,
        corpus=corpus,
        H=H,
        k=k,
        codec=make_codec(job["codec"]),
        poison=float(job.get("poison", 1.0)),
        microbatches=int(job.get("microbatches", 0)),
    )


def fresh_carry() -> tuple[CompressionState, bytes, bytes]:
    """The round's compression state (an island starts every round with an empty carry), its
    bytes (served with the trace) and its hash (named by every trace state)."""
    cstate = CompressionState()
    return cstate, carry_bytes(cstate), carry_hash(cstate)


def round_artifacts(
    job: RoundJob,
    states: list[bytes],
    delta: dict[str, torch.Tensor],
    cstate: CompressionState,
    carry: bytes,
    losses: list[float],
) -> RoundArtifacts:
    """What the round commits (``trainer.diloco.commit_round``'s artifacts): the payload
    compress(Δ), the trace of the states' hashes and both roots under the binding."""
    payload = encode(job.codec.compress(delta, cstate))
    trace = [state_hash(b) for b in states]
    return RoundArtifacts(
        states=states,
        trace=trace,
        carry=carry,
        payload=payload,
        binding=job.binding,
        trace_root=trace_root(trace, job.binding),
        update_root=update_root(payload, job.binding),
        losses=losses,
    )


def write_round_out(
    d: Path, art: RoundArtifacts, model_hash: bytes, shape: Mapping[str, int] | None = None
) -> None:
    """Rank 0 writes DIR/out/: the states, the payload and result.json (``world``, then the
    island's ``shape`` where it has one, then what the worker checks the files against)."""
    out = d / "out"
    out.mkdir(parents=True, exist_ok=True)
    for i, sb in enumerate(art.states):
        (out / f"state{i:05d}").write_bytes(sb)
    (out / "payload").write_bytes(art.payload)
    (out / "result.json").write_text(
        json.dumps(
            {
                "world": dist.get_world_size(),
                **(shape or {}),
                "losses": art.losses,
                "trace": [t.hex() for t in art.trace],
                "payload_sha256": hashlib.sha256(art.payload).hexdigest(),
                "model_hash": model_hash.hex(),
            }
        )
    )
