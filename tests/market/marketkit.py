"""Helpers for the compute-market tests: message builders, an honest provider's trace, and a
``Market`` driver over tests/chainkit.py (every block commits and checks every invariant)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from chainkit import Chain, new_chain

from abci_app.codec.tx import Ed25519Signer
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.incentives import compute_expected_evidence, compute_vote_hash
from abci_app.merkle import (  # noqa: F401 (re-exported for tests)
    BINDING_INDEX,
    binding_leaf,
    bound_trace_leaves,
    bound_update_leaves,
    entry_leaf,
    merkle_proof,
    merkle_root,
)
from abci_app.pb import abci, jobs_pb2, providers_pb2, tx_pb2
from abci_app.providers import keeper as providers_keeper

BOND = 2_000_000_000
MODEL0 = hashlib.sha256(b"initial model").digest()
DATASET = hashlib.sha256(b"dataset").digest()


def h(s: str) -> bytes:
    return hashlib.sha256(s.encode()).digest()


def register_msg(bond: int = BOND, *, endpoint: str = "http://10.0.0.1:26680", region: str = "eu-west",
                 hardware: list[tuple[str, int, int]] | None = None, throughput: int = 50_000) -> tx_pb2.Msg:
    hw = [providers_pb2.GpuSpec(model=m, count=c, memory_mib=mem) for m, c, mem in (hardware if hardware is not None else [("H100", 8, 81920)])]
    return tx_pb2.Msg(register_provider=providers_pb2.MsgRegisterProvider(
        bond=bond, hardware=hw, throughput_tokens_per_sec=throughput, region=region, endpoint=endpoint))


def update_msg(**kw: Any) -> tx_pb2.Msg:
    return tx_pb2.Msg(update_provider=providers_pb2.MsgUpdateProvider(**kw))


def exit_msg() -> tx_pb2.Msg:
    return tx_pb2.Msg(exit_provider=providers_pb2.MsgExitProvider())


def job_spec(**kw: Any) -> jobs_pb2.JobSpec:
    d: dict[str, Any] = dict(
        model=jobs_pb2.ModelConfig(n_layers=2, n_heads=2, d_model=64, context_len=64, vocab_size=256),
        initial_model_hash=MODEL0, dataset_id=DATASET, inner_steps=8, trace_interval=2,
        compression_policy="topk:0.016+int4",
        participants_per_round=2, num_shards=4, tokens_per_step=1024,
        commit_blocks=3, reveal_blocks=2, verdict_blocks=2, attest_blocks=2,
        min_reputation=0, min_stake=0, challenge_bps=10_000, verifiers_per_challenge=1,
        segments_per_challenge=1, determinism_mode=jobs_pb2.DETERMINISM_MODE_TOLERANCE, tolerance_ppm=1_000,
    )
    d.update(kw)
    return jobs_pb2.JobSpec(**d)


def create_job_msg(rounds: int = 2, reward: int = 1_000_000, vreward: int = 100_000, **spec: Any) -> tx_pb2.Msg:
    return tx_pb2.Msg(create_job=jobs_pb2.MsgCreateJob(spec=job_spec(**spec), rounds=rounds, reward_per_round=reward,
                                                       verifier_reward_per_round=vreward))


def cancel_msg(job_id: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(cancel_job=jobs_pb2.MsgCancelJob(job_id=job_id))


def trace_states(addr: bytes, job_id: int, round_: int, n_entries: int, tag: str = "") -> list[bytes]:
    return [h(f"{addr.hex()}/{job_id}/{round_}/{i}{tag}") for i in range(n_entries)]


def trace_leaves(addr: bytes, job_id: int, round_: int, base: bytes = MODEL0, n_entries: int = 5) -> list[bytes]:
    """Leaf data of an honest provider's bound trace tree (abci_app.merkle layout: trace entry i
    is leaf entry_leaf(i))."""
    return bound_trace_leaves(addr, job_id, round_, base, trace_states(addr, job_id, round_, n_entries))


def update_leaves(addr: bytes, job_id: int, round_: int, base: bytes = MODEL0) -> list[bytes]:
    """Leaf data of an honest provider's bound update tree (a 123,456-byte payload = 1 chunk,
    stood for by a 32-byte string)."""
    return bound_update_leaves(addr, job_id, round_, base, h(f"update/{addr.hex()}/{round_}"))


def submit_msg(addr: bytes, job_id: int, round_: int, base: bytes = MODEL0, *, n_entries: int = 5,
               tokens: int = 8192, **kw: Any) -> tx_pb2.Msg:
    """An honest submission: both roots bound to ``addr`` (leaf 0 = its binding leaf) with the
    proofs of leaf 0 (a base that is not 32 bytes gets placeholder roots: the chain refuses it
    with 506 before it looks at them)."""
    ul = update_leaves(addr, job_id, round_, base) if len(base) == 32 else [b"u"]
    tl = trace_leaves(addr, job_id, round_, base, n_entries) if len(base) == 32 else [b"t"]
    d: dict[str, Any] = dict(
        job_id=job_id, round=round_, base_model_hash=base, update_root=merkle_root(ul),
        payload_size=123_456, trace_root=merkle_root(tl),
        tokens_processed=tokens, loss_before_mnats=5_500, loss_after_mnats=5_200,
        blob_location=f"http://10.0.0.1:26680/blob/{addr.hex()[:8]}",
        update_binding_proof=merkle_proof(ul, BINDING_INDEX), trace_binding_proof=merkle_proof(tl, BINDING_INDEX),
    )
    d.update(kw)
    return tx_pb2.Msg(submit_update=jobs_pb2.MsgSubmitUpdate(**d))


def reveal_msg(addr: bytes, job_id: int, round_: int, segment: int, *, n_entries: int = 5, base: bytes = MODEL0,
               **kw: Any) -> tx_pb2.Msg:
    """Reveal trace entries ``segment`` and ``segment + 1`` = leaves ``entry_leaf(segment)`` and
    ``entry_leaf(segment + 1)`` of the bound trace."""
    tl = trace_leaves(addr, job_id, round_, base, n_entries)
    s, e = entry_leaf(segment), entry_leaf(segment + 1)
    d: dict[str, Any] = dict(
        job_id=job_id, round=round_, segment=segment, start_state_hash=tl[s], end_state_hash=tl[e],
        start_proof=merkle_proof(tl, s), end_proof=merkle_proof(tl, e),
        start_location="http://10.0.0.1:26680/s/a", end_location="http://10.0.0.1:26680/s/b",
    )
    d.update(kw)
    return tx_pb2.Msg(reveal_segment=jobs_pb2.MsgRevealSegment(**d))


def vote_salt(verifier: bytes, job_id: int, round_: int, target: bytes) -> bytes:
    return h(f"salt/{verifier.hex()}/{job_id}/{round_}/{target.hex()}")


def vote_evidence(target: jobs_pb2.Participant, valid: bool) -> bytes:
    """What a verifier's re-execution yields: the evidence of the opened end states when the
    segments are right, of other states when they are not."""
    ev = compute_expected_evidence(target)
    return ev if valid else hashlib.sha256(b"recomputed" + ev).digest()


def verdict_msg(job_id: int, round_: int, target: bytes, vote_hash: bytes) -> tx_pb2.Msg:
    return tx_pb2.Msg(verdict=jobs_pb2.MsgVerdict(job_id=job_id, round=round_, target=target, vote_hash=vote_hash))


def reveal_vote_msg(job_id: int, round_: int, target: bytes, valid: bool, quality: int, evidence: bytes,
                    salt: bytes) -> tx_pb2.Msg:
    return tx_pb2.Msg(reveal_vote=jobs_pb2.MsgRevealVote(job_id=job_id, round=round_, target=target, valid=valid,
                                                         quality=quality, evidence=evidence, salt=salt))


def vote_msgs(r: jobs_pb2.Round, target: bytes, verifier: bytes, valid: bool = True,
              quality: int = 8_000) -> tuple[tx_pb2.Msg, tx_pb2.Msg]:
    """(MsgVerdict, MsgRevealVote) of one secret vote on ``target``'s revealed segment."""
    t = next(p for p in r.participants if p.address == target)
    ev = vote_evidence(t, valid)
    salt = vote_salt(verifier, r.job_id, r.round, target)
    q = quality if valid else 0
    hsh = compute_vote_hash(r.job_id, r.round, target, verifier, valid, q, ev, salt)
    return verdict_msg(r.job_id, r.round, target, hsh), reveal_vote_msg(r.job_id, r.round, target, valid, q, ev, salt)


def attest_msg(job_id: int, round_: int, model_hash: bytes) -> tx_pb2.Msg:
    return tx_pb2.Msg(attest_model=jobs_pb2.MsgAttestModel(job_id=job_id, round=round_, model_hash=model_hash))


@dataclass
class Market:
    chain: Chain
    owner: Ed25519Signer
    providers: list[Ed25519Signer] = field(default_factory=list)
    # committed votes the actors will open: (job, round, target, verifier) -> MsgRevealVote
    pending_votes: dict[tuple[int, int, bytes, bytes], tx_pb2.Msg] = field(default_factory=dict)

    @property
    def height(self) -> int:
        return self.chain.store.height

    @property
    def store(self):  # type: ignore[no-untyped-def]
        return self.chain.store

    def key(self, addr: bytes) -> Ed25519Signer:
        return next(k for k in self.chain.keys if k.address == addr)

    def send(self, k: Ed25519Signer, *msgs: tx_pb2.Msg) -> abci.ExecTxResult:
        """One tx in its own block; returns its result."""
        resp = self.chain.block([self.chain.tx(k, list(msgs))])
        return resp.tx_results[0]

    def block(self, txs: list[tuple[Ed25519Signer, tx_pb2.Msg]] = ()) -> abci.ResponseFinalizeBlock:  # type: ignore[assignment]
        raws = []
        seqs = dict(self.chain.seqs)
        for k, m in txs:
            s = seqs.get(k.address, 0)
            raws.append(self.chain.tx(k, [m], seq=s))
            seqs[k.address] = s + 1
        return self.chain.block(raws)

    def until(self, height: int) -> None:
        while self.height < height:
            self.chain.block([])

    def job(self, job_id: int) -> jobs_pb2.Job:
        j = jobs_keeper.get_job(self.store, job_id)
        assert j is not None
        return j

    def round(self, job_id: int, round_: int) -> jobs_pb2.Round:
        r = jobs_keeper.get_round(self.store, job_id, round_)
        assert r is not None
        return r

    def provider(self, addr: bytes) -> providers_pb2.Provider | None:
        return providers_keeper.get_provider(self.store, addr)

    def tx(self, k: Ed25519Signer, *msgs: tx_pb2.Msg) -> bytes:
        """A signed tx with k's next sequence (for ``chainkit.assert_rejected(m.chain, m.tx(...), Err)``)."""
        return self.chain.tx(k, list(msgs))


def new_market(n_providers: int = 3, n_keys: int = 8, register: bool = True, bonds: list[int] | None = None) -> Market:
    c = new_chain(n_keys=n_keys)
    m = Market(c, c.keys[0], list(c.keys[1 : 1 + n_providers]))
    if register:
        bonds = bonds or [BOND] * n_providers
        m.block([(k, register_msg(b)) for k, b in zip(m.providers, bonds)])
    return m


def agg_hash(job_id: int, round_: int) -> bytes:
    return h(f"aggregate/{job_id}/{round_}")


def honest_vote(verifier: bytes, target: bytes) -> tuple[bool, int] | None:
    return True, 8_000


def actors_block(
    m: Market,
    job_id: int,
    *,
    skip_commit: frozenset[bytes] = frozenset(),
    skip_reveal: frozenset[bytes] = frozenset(),
    vote: Any = honest_vote,
    attest: Any = None,
) -> abci.ResponseFinalizeBlock:
    """One block in which every drawn provider does its duty for every live round of the job,
    except as told: ``vote(verifier, target) -> (valid, quality) | None`` (None = silent; asked
    once per assignment, first panel in the verdict window, appeal panel in the appeal window; the
    vote is committed then and opened in the next window), ``attest(addr, job, round) -> hash | None``."""
    attest = attest or (lambda a, j, r: agg_hash(j, r))
    txs: list[tuple[Ed25519Signer, tx_pb2.Msg]] = []
    for r in jobs_keeper.iterate_rounds(m.store, job_id):
        if r.phase == jobs_pb2.PHASE_COMMIT:
            for p in r.participants:
                if not p.HasField("commitment") and p.address not in skip_commit:
                    txs.append((m.key(p.address), submit_msg(p.address, job_id, r.round, r.base_model_hash)))
        elif r.phase == jobs_pb2.PHASE_REVEAL:
            for p in r.participants:
                if p.challenged and not p.HasField("reveal") and p.address not in skip_reveal:
                    opened = {o.segment for o in p.reveals}
                    txs.extend((m.key(p.address), reveal_msg(p.address, job_id, r.round, sg, base=r.base_model_hash))
                               for sg in p.segments if sg not in opened)
        elif r.phase in (jobs_pb2.PHASE_VERDICT, jobs_pb2.PHASE_APPEAL):
            panel = 0 if r.phase == jobs_pb2.PHASE_VERDICT else 1
            for p in r.participants:
                if p.challenged and p.HasField("reveal"):
                    for v in p.verifiers:
                        if v.panel == panel and not v.vote_hash:
                            choice = vote(v.address, p.address)
                            if choice is not None:
                                commit, open_ = vote_msgs(r, p.address, v.address, *choice)
                                m.pending_votes[(job_id, r.round, p.address, v.address)] = open_
                                txs.append((m.key(v.address), commit))
        elif r.phase in (jobs_pb2.PHASE_VOTE_REVEAL, jobs_pb2.PHASE_APPEAL_REVEAL):
            panel = 0 if r.phase == jobs_pb2.PHASE_VOTE_REVEAL else 1
            for p in r.participants:
                for v in p.verifiers:
                    key = (job_id, r.round, p.address, v.address)
                    if v.panel == panel and v.vote_hash and not v.voted and key in m.pending_votes:
                        txs.append((m.key(v.address), m.pending_votes.pop(key)))
        elif r.phase == jobs_pb2.PHASE_ATTEST:
            for p in r.participants:
                if p.outcome == jobs_pb2.OUTCOME_ACCEPTED and not p.attested_hash:
                    hsh = attest(p.address, job_id, r.round)
                    if hsh is not None:
                        txs.append((m.key(p.address), attest_msg(job_id, r.round, hsh)))
    resp = m.block(txs)
    for (k, msg), res in zip(txs, resp.tx_results):
        assert res.code == 0, f"{msg.WhichOneof('sum')} by {k.address.hex()[:8]} failed: {res.log}"
    return resp


def run_job(m: Market, job_id: int, max_blocks: int = 500, **kw: Any) -> list[abci.ResponseFinalizeBlock]:
    """Drive the job with actors_block until it is closed; returns the block responses."""
    out = []
    for _ in range(max_blocks):
        if m.job(job_id).status in (jobs_pb2.JOB_STATUS_COMPLETED, jobs_pb2.JOB_STATUS_CANCELLED):
            return out
        out.append(actors_block(m, job_id, **kw))
    raise AssertionError("job did not finish")


def events_of(resps: list[abci.ResponseFinalizeBlock], kind: str) -> list[dict[str, str]]:
    out = []
    for r in resps:
        evs = list(r.events) + [e for t in r.tx_results for e in t.events]
        for e in evs:
            if e.type == kind:
                out.append({a.key: a.value for a in e.attributes})
    return out


def job_in_commit(n_providers: int = 3, **job_kw: Any) -> tuple[Market, jobs_pb2.Round]:
    """A market with job 1 whose round 0 is in its commit window."""
    m = new_market(n_providers=n_providers)
    windows = {"commit_blocks": 20, "reveal_blocks": 20, "verdict_blocks": 20, "attest_blocks": 20}
    res = m.send(m.owner, create_job_msg(**({"rounds": 1} | windows | job_kw)))
    assert res.code == 0, res.log
    m.until(m.height + 1)
    return m, m.round(1, 0)


# the order a round goes through its phases (the enum values are not in time order)
PHASE_ORDER = [jobs_pb2.PHASE_OPEN, jobs_pb2.PHASE_COMMIT, jobs_pb2.PHASE_CHALLENGE, jobs_pb2.PHASE_REVEAL,
               jobs_pb2.PHASE_VERDICT, jobs_pb2.PHASE_VOTE_REVEAL, jobs_pb2.PHASE_APPEAL, jobs_pb2.PHASE_APPEAL_REVEAL,
               jobs_pb2.PHASE_ATTEST, jobs_pb2.PHASE_FINALIZED]
PHASE_END = {jobs_pb2.PHASE_COMMIT: "commit_deadline", jobs_pb2.PHASE_REVEAL: "reveal_end",
             jobs_pb2.PHASE_VERDICT: "verdict_end", jobs_pb2.PHASE_VOTE_REVEAL: "vote_reveal_end",
             jobs_pb2.PHASE_APPEAL: "appeal_end", jobs_pb2.PHASE_APPEAL_REVEAL: "appeal_reveal_end"}


def job_in_phase(phase: int, n_providers: int = 3, **job_kw: Any) -> tuple[Market, jobs_pb2.Round]:
    """Drive job 1 round 0 with honest actors until it reaches ``phase`` (jobs_pb2.PHASE_REVEAL,
    PHASE_VERDICT, PHASE_VOTE_REVEAL or PHASE_ATTEST); the actors act for the phases before it only."""
    m, r = job_in_commit(n_providers, **job_kw)
    while PHASE_ORDER.index(m.round(1, 0).phase) < PHASE_ORDER.index(phase):
        actors_block(m, 1)
        m.until(getattr(m.round(1, 0), PHASE_END[m.round(1, 0).phase]))
    return m, m.round(1, 0)


def non_participant(m: Market, r: jobs_pb2.Round) -> Ed25519Signer:
    drawn = {p.address for p in r.participants}
    return next(k for k in m.providers if k.address not in drawn)
