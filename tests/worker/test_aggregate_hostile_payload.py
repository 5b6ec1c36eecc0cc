"""Red-team: one accepted (e.g. unchallenged) provider commits to a payload whose bytes the
decoder does not turn into a PayloadError. ml.aggregate_payloads is documented to leave a
payload that does not decode out of the aggregate (excluded), but decode_update only catches
ValueError, so RecursionError / TypeError / RuntimeError escape aggregate_payloads, and with it
ProviderWorker.do_attest: no honest worker can attest the round (retried forever)."""

import struct

import pytest

from node.worker import ml
from tests.kits.workerkit import CORPUS, tiny_job
from trainer.commit import MAGIC
from trainer.determinism import set_determinism


def job() -> dict:
    return tiny_job()


def hostile_payloads() -> list[bytes]:
    def header(meta: bytes) -> bytes:
        codec = b"dense"
        return (
            MAGIC
            + struct.pack(">HBB", 1, 1, 0)
            + bytes([len(codec)])
            + codec
            + struct.pack(">I", len(meta))
            + meta
        )

    deep = header(b"[" * 20000 + b"]" * 20000) + struct.pack(">I", 0)
    name, part = b"w", b"val"
    entry = (
        struct.pack(">H", 1)
        + name
        + bytes([1, 1])
        + struct.pack(">Q", 4)
        + bytes([1])
        + bytes([len(part)])
        + part
        + bytes([1, 2])
        + struct.pack(">QQ", 0, 2**64 - 1)
    )
    zero_dim = header(b"{}") + struct.pack(">I", 1) + entry
    return [deep, zero_dim]


@pytest.mark.parametrize("bad", hostile_payloads(), ids=["deep-meta", "zero-dim"])
def test_a_payload_that_does_not_decode_is_excluded_not_fatal(bad: bytes) -> None:
    set_determinism(0, threads=1)
    plan = ml.JobPlan.from_job(job())
    base = ml.initial_model_bytes(plan.model, 0)
    # the hostile provider's payload (already matched against its own bound update root)
    out, excluded = ml.aggregate_payloads(plan, base, {"ee" * 20: bad}, CORPUS)
    assert "ee" * 20 in excluded and out.model == base
