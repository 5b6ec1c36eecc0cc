"""A job's inputs travel by hash: the dataset (``dataset_id`` = sha256 of the file) and the
initial model (``initial_model_hash`` = sha256 of the trainer's canonical model bytes).

Owner side, ``prepare_job_inputs``: hash both, store them **cold** (pinned: the owner serves
them for the job's whole life) in the owner's blob store, and return the spec fields. The
initial model is either a file (checked: canonical encoding, the job's model shape) or made
from a seed by ``trainer.portable_init`` (the same bytes on every machine).

Provider side, ``fetch_job_inputs``: fetch both by hash from the job's ``blob_sources`` (plus
any extra locations, e.g. other providers), each verified by the blob client and limited to the
size the job states. Used by ``loconet tx job create --data/--init-seed/--init-model`` and the
provider worker.
"""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from abci_app.jobs.incentives import compute_model_params
from abci_app.jobs.msgs import MAX_MODEL_DIM
from abci_app.pb import jobs_pb2
from node.blobs import BlobClient, BlobStore
from node.blobs.store import sha256_file
from node.errors import UsageError


@dataclass(frozen=True, slots=True)
class JobInputs:
    """Spec fields for the inputs a job owner stored (hashes hex; sizes in bytes; 0 = not set)."""

    dataset_id: str = ""
    dataset_bytes: int = 0
    initial_model_hash: str = ""
    initial_model_bytes: int = 0

    def spec_fields(self) -> dict[str, Any]:
        """The non-empty fields, keyed as ``build_create_job`` and ``query job -o json`` spell
        them."""
        return {k: v for k, v in asdict(self).items() if v}


MIN_DATASET_BYTES = 1024  # trainer.data.Corpus refuses less (a held-out split of 256 bytes)
MAX_INIT_PARAMS = 1 << 32  # 16 GiB of fp32: past this, building it here is a mistake


def check_model_shape(model: dict[str, int]) -> None:
    """The chain's rules for a job's ModelConfig (abci_app/jobs/msgs.py: each dimension 1..2^20,
    d_model a multiple of n_heads) and a size this machine can build, checked before the model
    is made: ``--model 99999999999,1,1,1,1`` hung the CLI building it."""

    dims = ("n_layers", "n_heads", "d_model", "context_len", "vocab_size")
    try:
        vals = {k: int(model[k]) for k in dims}
    except (KeyError, TypeError, ValueError):
        raise UsageError(f"bad model config {model}: give {', '.join(dims)}") from None
    for k, v in vals.items():
        if not 1 <= v <= MAX_MODEL_DIM:
            raise UsageError(f"bad model config: {k} must be 1..{MAX_MODEL_DIM}, got {v}")
    if vals["d_model"] % vals["n_heads"]:
        raise UsageError("bad model config: d_model must be a multiple of n_heads")
    n = compute_model_params(jobs_pb2.ModelConfig(**vals))
    if n > MAX_INIT_PARAMS:
        raise UsageError(
            f"the initial model would have ~{n:,} parameters ({4 * n >> 30} GiB): too large to "
            "build here; make it elsewhere and give its hash (--initial-model)"
        )


def initial_model_from(
    model: dict[str, int], *, init_seed: int | None = None, init_model: Path | None = None
) -> bytes:
    """Canonical model bytes for a job's ModelConfig ``model``: from a seed, or a checked file."""
    from trainer.portable_init import (  # lazy: imports torch (seconds)
        check_model_bytes,
        config_from_job,
        initial_model_bytes,
    )

    if (init_seed is None) == (init_model is None):
        raise UsageError("give exactly one of --init-seed N and --init-model FILE")
    check_model_shape(model)
    try:
        cfg = config_from_job(model)
    except (KeyError, TypeError, ValueError) as e:
        raise UsageError(f"bad model config {model}: {e}") from None
    if init_seed is not None:
        if not 0 <= init_seed < 2**64:
            raise UsageError(f"--init-seed must be 0..2^64-1, got {init_seed}")
        return initial_model_bytes(cfg, init_seed)
    assert init_model is not None
    try:
        buf = Path(init_model).read_bytes()
    except OSError as e:
        raise UsageError(f"cannot read --init-model {init_model}: {e.strerror or e}") from None
    try:
        check_model_bytes(buf, cfg)
    except ValueError as e:
        raise UsageError(f"--init-model {init_model}: {e}") from None
    return buf


def prepare_job_inputs(
    store: BlobStore | None,
    model: dict[str, int],
    *,
    data: Path | None = None,
    init_seed: int | None = None,
    init_model: Path | None = None,
) -> JobInputs:
    """Hash and store (cold, pinned) the dataset file and/or the initial model; returns the spec
    fields for whichever was given. ``store`` None (a dry run): hash only, store nothing."""

    dataset_id, dataset_bytes = "", 0
    if data is not None:
        if not Path(data).is_file():
            raise UsageError(f"--data {data} is not a file: give the training text file")
        size = Path(data).stat().st_size
        if size < MIN_DATASET_BYTES:  # an empty file made a job no provider could train
            raise UsageError(
                f"--data {data} holds {size} bytes: the trainer needs at least "
                f"{MIN_DATASET_BYTES} (trainer.data.Corpus)"
            )
        dataset_id = store.put_file(data, tier="cold") if store else sha256_file(Path(data))
        dataset_bytes = Path(data).stat().st_size
    model_hash, model_bytes = "", 0
    if init_seed is not None or init_model is not None:
        buf = initial_model_from(model, init_seed=init_seed, init_model=init_model)
        model_hash = store.put_bytes(buf, tier="cold") if store else hashlib.sha256(buf).hexdigest()
        model_bytes = len(buf)
    return JobInputs(dataset_id, dataset_bytes, model_hash, model_bytes)


def _spec_get(spec: Any, key: str) -> Any:
    if isinstance(spec, dict):
        return spec.get(key)
    value = getattr(spec, key)
    return value.hex() if isinstance(value, bytes) else value


def fetch_job_inputs(
    spec: Any,
    store: BlobStore,
    client: BlobClient,
    extra_sources: list[str] | tuple[str, ...] = (),
    tier: str = "hot",
) -> tuple[Path, Path]:
    """(initial model path, dataset path) in ``store``, fetched and verified if not there yet.
    ``spec``: a ``jobs_pb2.JobSpec`` or the ``spec`` dict of ``query job -o json``. Raises
    ``node.blobs.FetchFailed`` when no source delivers the right bytes."""
    sources = list(_spec_get(spec, "blob_sources") or ()) + list(extra_sources)
    model = client.fetch(
        _spec_get(spec, "initial_model_hash"),
        sources,
        store,
        tier=tier,
        max_bytes=int(_spec_get(spec, "initial_model_bytes") or 0) or None,
    )
    data = client.fetch(
        _spec_get(spec, "dataset_id"),
        sources,
        store,
        tier=tier,
        max_bytes=int(_spec_get(spec, "dataset_bytes") or 0) or None,
    )
    return model, data
