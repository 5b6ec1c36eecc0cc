"""The worker's verifier duty runs the full check (ml.verify_round =
trainer.verify.verify_challenge): an honest round is VALID with the evidence the chain expects,
a poisoned round (honest trace, update scaled by POISON_SCALE) is INVALID on the payload check,
a reveal that commits no trace list, or a served list other than the committed one, is INVALID,
and a round on a base that carries the outer momentum is VALID. Exact mode: the provider opens the
end by its leaf hash only and the committed list masks it; the verifier's evidence is the end state
its re-execution reached, and a lazy verifier's (public data only) is not it. Provider and verifier
are two
real workers with their own blob stores; the chain's answers are plain round JSON and a fetch
reads the provider's store (tests/testnet runs the real network)."""

from __future__ import annotations

import hashlib
import time
from pathlib import Path
from typing import Any

import pytest
import torch

from abci_app.jobs.incentives import compute_hidden_entries
from abci_app.merkle import hash_leaf
from node.client.keys import Keyring
from node.worker import ml
from node.worker.records import DUE_BLOCKS, Round, Vote
from node.worker.worker import ProviderWorker, WorkerConfig
from trainer.data import Corpus, synthetic_text
from trainer.determinism import set_determinism

DATA = synthetic_text(40_000)
MODEL = {"n_layers": 1, "n_heads": 2, "d_model": 16, "context_len": 16, "vocab_size": 256}
INIT = ml.initial_model_bytes(ml.config_from_job(MODEL), 0)
JOB: dict[str, Any] = {
    "id": 3,
    "spec": {
        "model": MODEL,
        "inner_steps": 4,
        "trace_interval": 2,
        "tokens_per_step": 64,
        "num_shards": 4,
        "dataset_id": Corpus(DATA).id,
        "dataset_bytes": len(DATA),
        "initial_model_hash": hashlib.sha256(INIT).hexdigest(),
        "initial_model_bytes": len(INIT),
        "compression_policy": "dense+int8",
        "blob_sources": [],
        "determinism_mode": "exact",
        "tolerance_ppm": 0,
    },
}
JOB_TOL = {"id": 3, "spec": dict(JOB["spec"], determinism_mode="tolerance", tolerance_ppm=1000)}


def worker(
    tmp: Path,
    key: str,
    behaviour: str,
    source,
    check: bool = True,
    procs: int = 1,
    job=JOB,
    pipeline: int = 1,
) -> ProviderWorker:
    Keyring(tmp).add(key)
    w = ProviderWorker(
        WorkerConfig(
            home=tmp,
            key=key,
            nodes=["http://127.0.0.1:9"],
            data_dir=tmp / key,
            check_hardware=False,
            behaviour=behaviour,
            procs=procs,
            pipeline=pipeline,
        )
    )
    w.endpoint = f"http://127.0.0.1:1/{key}"
    w._plans[3] = ml.JobPlan.from_job(job)
    for b in (DATA, INIT):  # the job's inputs, as the owner hands them out (testnet.seed_stores)
        w.store.put_bytes(b, tier="cold")
    w._endpoint_of = lambda address: "http://127.0.0.1:1/prov"  # type: ignore[method-assign]

    def fetch(
        h, first=(), *, tier="hot", round_key=None, max_bytes=None
    ):  # as the blob client does: hash-checked, stored
        data = source(h)
        stored = w.store.put_bytes(data, tier=tier, round_key=round_key)
        assert stored == h or not check  # unchecked: a store that hands back other bytes
        return data

    w.fetch = fetch  # type: ignore[method-assign]
    return w


def fields(vote: Vote | None) -> tuple[bool, int, list[bytes], str]:
    """(valid, quality, reached, why) of a vote, for the tests' assertions."""
    assert vote is not None
    return vote.valid, vote.quality, list(vote.reached), vote.why


def momentum_base() -> bytes:
    """An attested model as the network makes it: parameters and the outer momentum buffer."""
    from trainer.diloco import AggregationRule, network_outer_step

    init = ml.initial_model_bytes(ml.config_from_job(MODEL), 0)
    g = torch.Generator().manual_seed(5)
    model = ml.load_model(init, ml.config_from_job(MODEL))
    delta = {n: 1e-3 * torch.randn(p.shape, generator=g) for n, p in model.named_parameters()}
    heldout = Corpus(DATA).heldout_batches(16, 32, 1)
    out = network_outer_step(
        init, {"aa": delta}, heldout, AggregationRule(min_quality_mnats=-(10**6))
    )
    return out.model


def judged(
    tmp: Path,
    behaviour: str,
    segment: int = 1,
    drop_trace_list: bool = False,
    with_momentum: bool = False,
    other_list: bool = False,
    procs: int = 1,
    job=JOB,
    verifier: str = "honest",
    out: dict | None = None,
    segments: list[int] | None = None,
    pipeline: int = 1,
):
    """(the verifier's vote, the true end state hash of the opened segment). ``out`` gets the
    provider, the verifier, the round, the target, the submission and the sent messages.
    ``segments``: the challenged segments (default ``[segment]``), all opened."""
    segs = sorted(segments or [segment])
    prov, r, me, sent, blobs = committed(tmp, behaviour, job, with_momentum, procs, pipeline, out)
    (submit,) = [m.submit_update for m in sent]
    revs, target = revealed(prov, job, r, segs, sent, submit, drop_trace_list)
    rev = revs[0]

    def serve(h: str) -> bytes:
        if other_list and h == rev.trace_list_hash.hex():  # other bytes under the chain's hash
            return rev.trace_list[32:] + rev.trace_list[:32]
        return bytes(prov.store.read(h)) if prov.store.has(h) else blobs[h]

    trace = [bytes.fromhex(x) for x in prov.progress.round(3, 1)["trace"]]
    true_end = trace[segment + 1]
    check_masked_openings(job, trace, revs, segs)
    fetched: list[str] = []

    def serve_logged(h: str) -> bytes:
        fetched.append(h)
        return serve(h)

    ver = worker(tmp, "ver", verifier, serve_logged, check=not other_list, job=job)
    vote = ver.judge(job, dict(r, phase="verdict", participants=[target]), target, height=150)
    ver._pool.shutdown(wait=True)
    if out is not None:
        out.update(prov=prov, ver=ver, r=r, target=target, submit=submit, sent=sent, me=me)
        out.update(trace=trace, fetched=fetched)
    return fields(vote), true_end


def committed(
    tmp: Path,
    behaviour: str,
    job: dict,
    with_momentum: bool,
    procs: int,
    pipeline: int,
    out: dict | None,
) -> tuple[ProviderWorker, dict[str, Any], dict[str, Any], list, dict[str, bytes]]:
    """A provider that trained round 1 of job 3 and committed it: (the provider, the round, its
    participant record, the messages it sent, the blobs it was given)."""
    set_determinism(0, threads=1)
    model = ml.config_from_job(job["spec"]["model"])
    base = momentum_base() if with_momentum else ml.initial_model_bytes(model, 0)
    blobs = {hashlib.sha256(base).hexdigest(): base, JOB["spec"]["dataset_id"]: DATA}
    sent: list = []
    prov = worker(
        tmp, "prov", behaviour, lambda h: blobs[h], procs=procs, job=job, pipeline=pipeline
    )

    def send(*msgs: Any) -> dict[str, Any]:
        sent.extend(msgs)
        return {"txhash": "00" * 32, "height": 10}

    prov._send = send  # type: ignore[method-assign]  # the test records the worker's txs
    r: dict[str, Any] = {
        "job_id": 3,
        "round": 1,
        "phase": "commit",
        "base_model_hash": hashlib.sha256(base).hexdigest(),
        "windows": {"commit_deadline": 100, "verdict_end": 200},
    }
    me = {"address": prov.me, "shard": 2, "commitment": None, "challenge": None}
    r["participants"] = [me]
    prov.do_commit(job, r, me, height=50)
    island = procs > 1 or pipeline > 1
    deadline = time.monotonic() + (300 if island else 60)  # an island starts torchrun
    while prov._training is not None and not prov._training[1].done():
        assert time.monotonic() < deadline
        time.sleep(0.05)
    prov.do_commit(job, r, me, height=51)
    prov._pool.shutdown(wait=True)
    if island:  # the island's trace says so: every state names its slices
        from trainer.state import load_state

        st = load_state(bytes(prov.store.read(prov.progress.round(3, 1)["trace"][-1])))
        plan = ml.JobPlan.from_job(job)
        m = ml.check_island_plan(plan, procs, pipeline, 0)
        want = (procs, 1) if pipeline == 1 else (m, 1) if procs == 1 else (procs, m)
        assert (st.slices, st.microbatches) == want
        if out is not None:
            out["slicing"] = want
    return prov, r, me, sent, blobs


def revealed(
    prov: ProviderWorker,
    job: dict,
    r: dict[str, Any],
    segs: list[int],
    sent: list,
    submit: Any,
    drop_trace_list: bool,
) -> tuple[list[Any], dict[str, Any]]:
    """The provider opens the challenged segments ``segs``: (its MsgRevealSegments, the target
    as the verifier reads it from the chain)."""
    ch = {"segment": segs[0], "segments": segs, "opened": [], "reveal": None, "verifiers": []}
    prov.do_reveal(job, dict(r, phase="reveal"), {"challenge": ch})
    revs = [m.reveal_segment for m in sent[1:]]
    assert [x.segment for x in revs] == segs
    rev = revs[0]
    assert hashlib.sha256(rev.trace_list).digest() == rev.trace_list_hash  # the first opening
    assert prov.store.has(rev.trace_list_hash.hex())  # and the provider serves it
    openings = [
        {
            "segment": x.segment,
            "start_state_hash": x.start_state_hash.hex(),
            "end_state_hash": x.end_state_hash.hex(),
            "start_location": x.start_location,
            "end_location": x.end_location,
            "trace_list_hash": "" if drop_trace_list else rev.trace_list_hash.hex(),
            "end_leaf_hash": x.end_leaf_hash.hex(),
            "start_leaf_hash": x.start_leaf_hash.hex(),
        }
        for x in revs
    ]
    target = {
        "address": prov.me,
        "shard": 2,
        "commitment": {
            "update_root": submit.update_root.hex(),
            "trace_root": submit.trace_root.hex(),
            "payload_size": submit.payload_size,
            "blob_location": submit.blob_location,
        },
        "challenge": dict(ch, opened=segs, reveals=openings, reveal=openings[-1]),
    }
    return revs, target


def check_masked_openings(job: dict, trace: list[bytes], revs: list[Any], segs: list[int]) -> None:
    """Both modes: the ends are opened by their leaf hashes only, and so is every start but a
    run's; the committed trace list masks them (entry H/k is public: the payload check)."""
    n = job["spec"]["inner_steps"] // job["spec"]["trace_interval"]
    hidden = compute_hidden_entries(segs, n)
    listed = ml.parse_trace_list(revs[0].trace_list)
    assert listed == [hash_leaf(x) if i in hidden else x for i, x in enumerate(trace)]
    for x in revs:
        assert not x.end_state_hash and not x.end_location
        assert x.end_leaf_hash == hash_leaf(trace[x.segment + 1])
        if x.segment - 1 in segs:  # not a run's start
            assert not x.start_state_hash and not x.start_location
            assert x.start_leaf_hash == hash_leaf(trace[x.segment])
        else:
            assert x.start_state_hash == trace[x.segment] and not x.start_leaf_hash


@pytest.mark.parametrize("job", [JOB, JOB_TOL], ids=["exact", "tolerance"])
@pytest.mark.parametrize("segment", [0, 1])
def test_honest_round_is_valid_with_the_expected_evidence(tmp_path, segment, job):
    (valid, quality, reached, why), true_end = judged(tmp_path, "honest", segment, job=job)
    assert valid, why
    assert reached == [true_end] and 1 <= quality <= ml.MAX_QUALITY
    assert "start, payload and 1 segment(s)" in why


def test_lazy_verifier_lacks_the_evidence_in_exact_mode(tmp_path):
    """A lazy verifier (public data only) votes valid without the secret end state: the chain
    refuses to open that vote (incentives.is_reached_valid); the diligent one above has it."""
    (valid, _q, reached, why), true_end = judged(tmp_path, "honest", 0, verifier="lazy-verifier")
    assert valid and "lazy" in why and hash_leaf(reached[0]) != hash_leaf(true_end)


def test_poisoned_round_is_refused_on_the_payload(tmp_path):
    (valid, quality, reached, why), true_end = judged(tmp_path, "poison")
    assert not valid and quality == 0
    assert why.startswith("payload:") and "update roots differ" in why
    assert reached != [true_end]  # an invalid vote never carries the valid vote's evidence


def test_a_reveal_without_its_trace_list_is_refused(tmp_path):
    (valid, _q, reached, why), true_end = judged(tmp_path, "honest", drop_trace_list=True)
    assert not valid and "trace list" in why and reached != [true_end]


def test_a_trace_list_other_than_the_committed_one_is_refused(tmp_path):
    """The verifier reads the trace list's hash from the chain and refuses other bytes."""
    (valid, _q, reached, why), true_end = judged(tmp_path, "honest", other_list=True)
    assert not valid and "not the one committed on chain" in why and reached != [true_end]


def test_a_round_on_a_base_carrying_the_outer_momentum_is_valid(tmp_path):
    """Attested models carry the outer Nesterov buffer: trace entry 0 holds the base's
    parameters only, and the verifier ties it to the base by the parameters hash."""
    base = momentum_base()
    assert ml.params_hash(base) != hashlib.sha256(base).digest()
    (valid, _q, reached, why), true_end = judged(tmp_path, "honest", 0, with_momentum=True)
    assert valid, why
    assert reached == [true_end]


def test_without_the_parameters_hash_a_momentum_base_start_is_refused():
    """verify_challenge against the chain's hash alone (the model bytes with the momentum) does
    not accept entry 0: the parameters hash is what binds the start, not a looser check."""
    from trainer.commit import Binding
    from trainer.verify import verify_start

    base = momentum_base()
    plan = ml.JobPlan.from_job(JOB)
    spec = plan.shard_spec(1, "prov", 2)
    binding = Binding(b"\x01" * 20, 3, 1, hashlib.sha256(base).digest())
    codec = plan.compression().choose(
        1, {n: tuple(p.shape) for n, p in ml.load_model(base, plan.model).named_parameters()}
    )
    work = ml.train_round(plan, base, Corpus(DATA), spec, binding, codec)
    kw = {"round": 1, "shard": 2, "inner": plan.inner, "model": plan.model}
    assert verify_start(work.states[0], base_model_hash=ml.params_hash(base), **kw).valid
    v = verify_start(work.states[0], base_model_hash=hashlib.sha256(base).digest(), **kw)
    assert not v.valid and "base model" in v.reason


@pytest.mark.slow  # two torchrun islands of 2 gloo processes
@pytest.mark.parametrize("behaviour", ["honest", "poison"])
def test_island_round_is_judged_by_a_single_process_verifier(tmp_path, behaviour):
    """`provider run --procs 2`: the round trains on a 2-process gloo island (DDP), commits once,
    and a verifier with ONE process re-executes the opened segment as 2 slices in exact mode
    (segment 0: its end is secret, the verifier's re-executed state is the evidence): the honest
    island is VALID, the poisoned one (honest island trace, scaled update) INVALID. Entry 0,
    which names the island's size (slices = 2), is built by the verifier, not fetched."""
    box: dict = {}
    (valid, quality, reached, why), true_end = judged(tmp_path, behaviour, 0, procs=2, out=box)
    assert box["trace"][0].hex() not in box["fetched"]
    if behaviour == "honest":
        assert valid, why
        assert reached == [true_end] and 1 <= quality <= ml.MAX_QUALITY
        assert "start, payload and 1 segment(s)" in why
    else:
        assert not valid and why.startswith("payload:") and "update roots differ" in why


def test_unavailable_blobs_are_retried_until_the_acting_panels_window_ends(tmp_path):
    """A fetch failure is retried while the window the verifier's panel commits in is open (the
    appeal and final panels vote long after verdict_end); near its last block the vote is
    UNAVAILABLE."""
    from node.blobs import BlobError

    def unavailable(h: str) -> bytes:
        raise BlobError(f"{h[:8]} unavailable")

    ver = worker(tmp_path, "ver", "honest", unavailable)
    opening = {
        "segment": 0,
        "start_state_hash": "11" * 32,
        "end_state_hash": "",
        "end_leaf_hash": "22" * 32,
        "start_location": "http://127.0.0.1:1/prov/blob/" + "11" * 32,
        "end_location": "",
        "trace_list_hash": "33" * 32,
    }
    target = {
        "address": ver.me,
        "shard": 2,
        "commitment": {"update_root": "44" * 32, "trace_root": "55" * 32, "payload_size": 1},
        "challenge": {"segment": 0, "segments": [0], "reveals": [opening], "reveal": opening},
    }
    windows = {"verdict_end": 100, "appeal_end": 140, "final_end": 180}
    r = {"job_id": 3, "round": 1, "base_model_hash": "66" * 32, "windows": windows}
    for h in (150, 160, 170, 175, 177):  # open until 180: however many tries fail, retry (a
        # crashed provider that restarts inside the window is still verified)
        with pytest.raises(BlobError):
            ver.judge(JOB, dict(r, phase="final", participants=[target]), target, height=h)
    vote = ver.judge(  # 2 blocks before the end: the vote must still land
        JOB, dict(r, phase="final", participants=[target]), target, height=178
    )
    assert vote is not None
    valid, _q, reached, why = fields(vote)
    assert not valid and "unavailable (6 tries)" in why
    # an unavailable vote (nothing reached), not an invalid one: framing this verifier costs it
    # the liveness slash at most (docs/threat-model.md *Unavailable votes*)
    assert reached == [] and vote.is_unavailable
    ver._pool.shutdown(wait=True)


def test_a_duty_near_its_deadline_is_retried_whatever_its_backoff(tmp_path):
    """chaos.py --providers found a verifier whose 3rd failed fetch put its next try 4 s later,
    past the verdict window's end: silent, slashed for liveness. In the last DUE_BLOCKS of a
    window a failing duty is tried again at least every DUE_RETRY_S; before that, the backoff
    holds (a persistent error is not hammered)."""
    from node.worker import worker as wk

    w = worker(tmp_path, "w", "honest", lambda h: b"")
    calls: list[float] = []

    def failing() -> None:
        calls.append(time.monotonic())
        raise OSError("node down")

    r = Round.from_json({"phase": "reveal", "windows": {"reveal_end": 100}})
    for _ in range(4):  # far from the end: the backoff (1, 2, 4 s ...) holds after the first
        w._duty("reveal/3/1", failing, due=r.is_due(50))
    assert len(calls) == 1
    assert not r.is_due(100 - DUE_BLOCKS - 1) and r.is_due(100 - DUE_BLOCKS)
    w._backoff["reveal/3/1"].next_try = time.monotonic() + 60  # as after many failures
    w._duty("reveal/3/1", failing, due=r.is_due(97))
    assert len(calls) == 1  # the last try was just now
    time.sleep(wk.DUE_RETRY_S + 0.05)
    w._duty("reveal/3/1", failing, due=r.is_due(98))
    assert len(calls) == 2, "a duty due within DUE_BLOCKS waited for its 60 s backoff"
    w._duty("reveal/3/1", failing, due=False)  # not due: the backoff holds again
    assert len(calls) == 2
    final = Round.from_json({"phase": "finalized", "windows": {}})
    assert final.phase_end() == 0 and not final.is_due(10**9)
    w._pool.shutdown(wait=True)


@pytest.mark.parametrize("verifier", ["honest", "lazy-verifier"])
def test_tolerance_round_probes_end_to_end(tmp_path, verifier):
    """Tolerance mode through the real workers: the provider commits the probes of its trace
    (bound probe root), reveals the end as a leaf hash, and opens the end and its probe after the
    votes (MsgOpenEnd, proven against the probe root); the verifier commits a blind vote on the
    probes of its re-executed ends, then judges the opened end and opens its vote VALID. Its
    probes are within the chain's bound of the provider's; a lazy verifier's (no re-execution)
    are not, so the chain counts its valid vote as invalid."""
    from abci_app.jobs.incentives import compute_blind_vote_hash
    from abci_app.jobs.probe import compute_probe_evidence, encode_probe, is_probe_within
    from abci_app.merkle import binding_leaf, entry_leaf, n_trace_leaves, verify_merkle_proof
    from node.client.market_msgs import vote_salt

    box: dict = {}
    (valid, _q, reached, why), true_end = judged(
        tmp_path, "honest", 1, job=JOB_TOL, verifier=verifier, out=box
    )
    prov, ver, r, target, submit = box["prov"], box["ver"], box["r"], box["target"], box["submit"]
    prog = prov.progress.round(3, 1)
    probes = prog["probes"]
    n = n_trace_leaves(len(prog["trace"]))
    base = bytes.fromhex(r["base_model_hash"])
    leaf0 = binding_leaf(b"probe", prov.me_bytes, 3, 1, base)
    assert verify_merkle_proof(submit.probe_root, leaf0, 0, n, list(submit.probe_binding_proof))
    # the verifier's blind vote
    vsent: list = []
    ver._send = lambda *m: vsent.extend(m) or {"txhash": "00" * 32, "height": 151}
    rr = dict(r, participants=[target])
    rr["windows"] = dict(r["windows"], vote_reveal_end=300)
    ver.do_verify(JOB_TOL, dict(rr, phase="verdict"), target, height=150)
    (commit,) = [m.verdict for m in vsent]
    mine = ver.progress.round(3, 1)["votes"][target["address"]]["probes"]
    ev = compute_probe_evidence(mine)
    salt = vote_salt(ver.key.signer, 3, 1, prov.me_bytes)
    assert commit.vote_hash == compute_blind_vote_hash(
        3, 1, prov.me_bytes, ver.key.signer.address, ev, salt
    )
    if verifier == "honest":  # it waits for the ends before opening its vote (a later block) ...
        ver.do_open_vote(JOB_TOL, dict(rr, phase="vote_reveal"), target, height=160)
        assert len(vsent) == 1
    # the provider opens the end after the votes
    psent: list = box["sent"]
    before = len(psent)
    opening = dict(target["challenge"]["reveals"][0])
    me = dict(box["me"], challenge=dict(target["challenge"], reveals=[opening]))
    prov.do_open_end(JOB_TOL, dict(rr, phase="vote_reveal"), me)
    (oe,) = [m.open_end for m in psent[before:]]
    assert oe.end_state_hash == true_end and list(oe.probe) == probes[2]
    assert verify_merkle_proof(
        submit.probe_root, encode_probe(list(oe.probe)), entry_leaf(2), n, list(oe.probe_proof)
    )
    opened = dict(
        opening,
        end_state_hash=oe.end_state_hash.hex(),
        end_location=oe.end_location,
        end_probe=list(oe.probe),
        end_opened_height=160,
    )
    t2 = dict(target, challenge=dict(target["challenge"], reveals=[opened], reveal=opened))
    ver.do_open_vote(JOB_TOL, dict(rr, phase="vote_reveal", participants=[t2]), t2, height=161)
    (rv,) = [m.reveal_vote for m in vsent[1:]]
    assert list(rv.probes) == mine and rv.evidence == ev and not rv.reached
    if verifier == "honest":
        assert rv.valid and is_probe_within(list(oe.probe), mine, 1_000)
        assert mine == probes[2]  # the same stack: the same floats
        # ... unless the window closes first: then it opens VALID on its probes alone (the chain
        # still compares them with the provider's, if the provider opens in this last block)
        vsent.clear()
        ver.progress.round(3, 1)["votes"][target["address"]]["valid"] = True
        ver.do_open_vote(JOB_TOL, dict(rr, phase="vote_reveal"), target, height=299)
        (late,) = [m.reveal_vote for m in vsent]
        assert late.valid and list(late.probes) == mine
    else:
        assert rv.valid and not is_probe_within(list(oe.probe), mine, 1_000)


# a trace of four segments (k = 1): a run inside the trace, and one ending at H/k
JOB4: dict[str, Any] = {"id": 3, "spec": dict(JOB["spec"], trace_interval=1)}
JOB4_TOL: dict[str, Any] = {
    "id": 3,
    "spec": dict(JOB["spec"], determinism_mode="tolerance", tolerance_ppm=1000, trace_interval=1),
}


@pytest.mark.parametrize("job", [JOB4, JOB4_TOL], ids=["exact", "tolerance"])
@pytest.mark.parametrize("segs", [[1, 2], [0, 1, 2, 3]], ids=["inner-run", "whole-trace"])
def test_honest_run_of_adjacent_segments_is_valid_end_to_end(tmp_path, job, segs):
    """The provider opens only each run's start (the other starts as leaf hashes) and masks
    every end but H/k; the verifier re-executes the run through from its start, its own reached
    state being the next segment's start: it never fetches a secret state, and its vote is VALID
    with every end of the run as evidence (exact mode: the committed ends, byte for byte)."""
    box: dict = {}
    (valid, q, reached, why), _ = judged(
        tmp_path, "honest", segs[0], job=job, segments=segs, out=box
    )
    assert valid, why
    assert f"start, payload and {len(segs)} segment(s)" in why and 1 <= q <= ml.MAX_QUALITY
    trace = box["trace"]
    assert reached == [trace[s + 1] for s in segs]
    secret = compute_hidden_entries(segs, len(trace) - 1)
    assert secret and not {trace[i].hex() for i in secret} & set(box["fetched"])
    if job is JOB4_TOL:  # the blind vote's probes: one per opened segment, the provider's own
        prog = box["prov"].progress.round(3, 1)
        mine = box["ver"]._probes[(3, 1, box["target"]["address"])]
        assert mine == [x for s in segs for x in prog["probes"][s + 1]]


def test_lazy_verifier_cannot_name_the_ends_of_a_run(tmp_path):
    """Exact mode, all four segments opened (one run ending at H/k: before the run-start rule
    every end was public). The lazy verifier's guesses from public data have the committed leaf
    only for the end that is entry H/k: its valid vote cannot be opened (incentives
    .is_reached_valid)."""
    box: dict = {}
    (valid, _q, reached, why), _ = judged(
        tmp_path, "honest", 0, job=JOB4, segments=[0, 1, 2, 3], verifier="lazy-verifier", out=box
    )
    assert valid and "lazy" in why
    leaves = [bytes.fromhex(o["end_leaf_hash"]) for o in box["target"]["challenge"]["reveals"]]
    assert [hash_leaf(x) == leaf for x, leaf in zip(reached, leaves, strict=True)] == [False] * 4


def test_tolerance_run_opened_ends_are_judged_on_the_displacement(tmp_path, monkeypatch):
    """Tolerance mode, a run of two opened segments: after the provider opens its ends
    (MsgOpenEnd), the verifier judges the second segment from the provider's opened start (the
    first segment's end) with its own re-executed displacement (trainer.verify_run.shift_state),
    and opens its vote VALID."""
    box: dict = {}
    (valid, _q, _reached, why), _ = judged(
        tmp_path, "honest", 1, job=JOB4_TOL, segments=[1, 2], out=box
    )
    assert valid, why
    prov, ver, r, target = box["prov"], box["ver"], box["r"], box["target"]
    vsent: list = []
    ver._send = lambda *m: vsent.extend(m) or {"txhash": "00" * 32, "height": 151}
    rr = dict(r, participants=[target])
    rr["windows"] = dict(r["windows"], vote_reveal_end=300)
    ver.do_verify(JOB4_TOL, dict(rr, phase="verdict"), target, height=150)
    psent: list = box["sent"]
    before = len(psent)
    prov.do_open_end(
        JOB4_TOL, dict(rr, phase="vote_reveal"), dict(box["me"], challenge=target["challenge"])
    )
    oes = {m.open_end.segment: m.open_end for m in psent[before:]}
    assert sorted(oes) == [1, 2]
    opened = [
        dict(
            o,
            end_state_hash=oes[o["segment"]].end_state_hash.hex(),
            end_location=oes[o["segment"]].end_location,
            end_probe=list(oes[o["segment"]].probe),
            end_opened_height=160,
        )
        for o in target["challenge"]["reveals"]
    ]
    t2 = dict(target, challenge=dict(target["challenge"], reveals=opened, reveal=opened[-1]))
    v = ver.progress.round(3, 1)["votes"][target["address"]]
    assert ver.judge_opened_ends(JOB4_TOL, rr, t2, v, height=161) == (
        True,
        "opened ends within tolerance of the re-execution",
    )
    ver.do_open_vote(JOB4_TOL, dict(rr, phase="vote_reveal", participants=[t2]), t2, height=161)
    (rv,) = [m.reveal_vote for m in vsent[1:]]
    assert rv.valid and len(rv.probes) == 2 * 32
    # a verifier whose re-execution of the second segment drifted (from its own start) too far
    # passes: that segment is re-executed once more from the provider's opened start, which
    # decides
    from trainer.commit import KIND_STATE, decode, encode

    p = decode(bytes(ver.store.read(v["reached"][1])), expected_kind=KIND_STATE)
    for e in p.entries.values():
        e.parts["param"] = e.parts["param"] + 1e-2
    drifted = ver.store.put_bytes(encode(p), tier="temp", round_key="3/1")
    calls: list = []
    real = ml.reexecute_segment
    monkeypatch.setattr(ml, "reexecute_segment", lambda *a, **kw: calls.append(1) or real(*a, **kw))
    v2 = dict(v, reached=[v["reached"][0], drifted])
    assert ver.judge_opened_ends(JOB4_TOL, rr, t2, v2, height=161)[0] and calls == [1]
    # the provider's opened end of the second segment is not its work: refused after both
    bad = dict(opened[1], end_state_hash=opened[0]["end_state_hash"])
    t3 = dict(target, challenge=dict(target["challenge"], reveals=[opened[0], bad], reveal=bad))
    valid3, why3 = ver.judge_opened_ends(JOB4_TOL, rr, t3, v2, height=161)
    assert not valid3 and "segment 2" in why3
