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

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from node.blobs import BlobClient, BlobStore
from node.errors import UsageError


@dataclass(frozen=True, slots=True)
class JobInputs:
    """Spec fields for the inputs a job owner stored (hashes hex; sizes in bytes; 0 = not set)."""

    dataset_id: str = ""
    dataset_bytes: int = 0
    initial_model_hash: str = ""
    initial_model_bytes: int = 0

    def spec_fields(self) -> dict[str, Any]:
        """The non-empty fields, keyed as ``build_create_job`` and ``query job -o json`` spell them."""
        return {k: v for k, v in asdict(self).items() if v}


def initial_model_from(model: dict[str, int], *, init_seed: int | None = None, init_model: Path | None = None) -> bytes:
    """Canonical model bytes for a job's ModelConfig ``model``: from a seed, or a checked file."""
    from trainer.portable_init import check_model_bytes, config_from_job, initial_model_bytes

    if (init_seed is None) == (init_model is None):
        raise UsageError("give exactly one of --init-seed N and --init-model FILE")
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
    store: BlobStore,
    model: dict[str, int],
    *,
    data: Path | None = None,
    init_seed: int | None = None,
    init_model: Path | None = None,
) -> JobInputs:
    """Hash and store (cold, pinned) the dataset file and/or the initial model; returns the spec
    fields for whichever was given."""
    dataset_id, dataset_bytes = "", 0
    if data is not None:
        if not Path(data).is_file():
            raise UsageError(f"--data {data} is not a file: give the training text file")
        dataset_id = store.put_file(data, tier="cold")
        dataset_bytes = Path(data).stat().st_size
    model_hash, model_bytes = "", 0
    if init_seed is not None or init_model is not None:
        buf = initial_model_from(model, init_seed=init_seed, init_model=init_model)
        model_hash = store.put_bytes(buf, tier="cold")
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
        _spec_get(spec, "initial_model_hash"), sources, store, tier=tier,
        max_bytes=int(_spec_get(spec, "initial_model_bytes") or 0) or None,
    )
    data = client.fetch(
        _spec_get(spec, "dataset_id"), sources, store, tier=tier,
        max_bytes=int(_spec_get(spec, "dataset_bytes") or 0) or None,
    )
    return model, data
