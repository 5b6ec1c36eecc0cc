"""An invalid vote names the verifier's real re-executed end of every opened segment (issue 31:
a later panel's votes are compared end by end): the provider commits a trace whose entry 2 is
faked (segment 1's end, segment 2's start), every other state honest, and all four segments
are opened (one run). The verifier refuses segment 1, goes on from the state it reached itself,
and its vote carries the true hashes of entries 1 to 4, not a padding after the failure."""

from __future__ import annotations

import hashlib
from typing import Any

from abci_app.merkle import hash_leaf
from node.worker import ml
from tests.worker.test_worker_verify import JOB4, judged
from trainer.commit import KIND_STATE, decode, encode


def test_an_invalid_vote_carries_the_true_end_of_every_segment(tmp_path, monkeypatch) -> None:
    real = ml.train_round
    honest: list[bytes] = []

    def cheat(*a: Any, **kw: Any) -> ml.RoundWork:
        work = real(*a, **kw)
        honest.extend(work.states)
        p = decode(work.states[2], expected_kind=KIND_STATE)
        for e in p.entries.values():
            e.parts["param"] = e.parts["param"] * 1.01
        work.states[2] = encode(p)
        work.trace = [hashlib.sha256(s).digest() for s in work.states]
        return work

    monkeypatch.setattr(ml, "train_round", cheat)
    box: dict = {}
    (valid, quality, reached, why), _ = judged(
        tmp_path, "honest", 0, job=JOB4, segments=[0, 1, 2, 3], out=box
    )
    assert not valid and quality == 0
    assert why.startswith("segment 1:") and "not the committed trace leaf" in why
    true = [hashlib.sha256(honest[i]).digest() for i in (1, 2, 3, 4)]
    assert reached == true  # every segment re-executed, the faked one and the ones after it
    committed = box["trace"]  # the provider's trace: entry 2 is the fake
    assert committed[2] != true[1] and [committed[i] for i in (1, 3, 4)] == [true[0], *true[2:]]
    leaves = [bytes.fromhex(o["end_leaf_hash"]) for o in box["target"]["challenge"]["reveals"]]
    assert [hash_leaf(x) == leaf for x, leaf in zip(reached, leaves, strict=True)] == [
        True,
        False,
        True,
        True,
    ]
