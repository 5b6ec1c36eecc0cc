"""Helpers for the compute-market tests: message builders, an honest provider's trace, and a
``Market`` driver over tests/kits/chainkit.py (every block commits and checks every invariant)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

from abci_app.codec.tx import Ed25519Signer
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.incentives import (
    UNAVAILABLE_EVIDENCE,
    compute_blind_vote_hash,
    compute_evidence,
    compute_fresh_segments,
    compute_masked_entries,
    compute_panel_reveals,
    compute_panel_segments,
    compute_vote_hash,
    is_run_start,
    mask_trace,
)
from abci_app.jobs.phases import PHASE_END_FIELD
from abci_app.jobs.probe import PROBE_DIM, compute_probe_evidence, encode_probe
from abci_app.jobs.rounds import compute_n_segments
from abci_app.merkle import (  # noqa: F401 (re-exported for tests)
    BINDING_INDEX,
    binding_leaf,
    bound_trace_leaves,
    bound_update_leaves,
    entry_leaf,
    hash_leaf,
    merkle_proof,
    merkle_root,
)
from abci_app.pb import abci, jobs_pb2, providers_pb2, tx_pb2
from abci_app.providers import keeper as providers_keeper
from tests.kits.chainkit import KIT_JOBS_PARAMS, KIT_PROVIDERS_PARAMS, Chain, new_chain

BOND = 2_000_000_000
MODEL0 = hashlib.sha256(b"initial model").digest()
DATASET = hashlib.sha256(b"dataset").digest()


def h(s: str) -> bytes:
    return hashlib.sha256(s.encode()).digest()


def register_msg(
    bond: int = BOND,
    *,
    endpoint: str = "http://10.0.0.1:26680",
    region: str = "eu-west",
    hardware: list[tuple[str, int, int]] | None = None,
    throughput: int = 50_000,
) -> tx_pb2.Msg:
    hw = [
        providers_pb2.GpuSpec(model=m, count=c, memory_mib=mem)
        for m, c, mem in (hardware if hardware is not None else [("H100", 8, 81920)])
    ]
    return tx_pb2.Msg(
        register_provider=providers_pb2.MsgRegisterProvider(
            bond=bond,
            hardware=hw,
            throughput_tokens_per_sec=throughput,
            region=region,
            endpoint=endpoint,
        )
    )


def update_msg(**kw: Any) -> tx_pb2.Msg:
    return tx_pb2.Msg(update_provider=providers_pb2.MsgUpdateProvider(**kw))


def exit_msg() -> tx_pb2.Msg:
    return tx_pb2.Msg(exit_provider=providers_pb2.MsgExitProvider())


EXACT = {  # job_spec(**EXACT): an exact-mode job (the ends of opened segments stay secret)
    "determinism_mode": jobs_pb2.DETERMINISM_MODE_EXACT,
    "tolerance_ppm": 0,
    "stack": "torch=2.4.1;device=cpu;dtype=float32;tf32=off",
}


def job_spec(**kw: Any) -> jobs_pb2.JobSpec:
    d: dict[str, Any] = {
        "model": jobs_pb2.ModelConfig(
            n_layers=2, n_heads=2, d_model=64, context_len=64, vocab_size=256
        ),
        "initial_model_hash": MODEL0,
        "dataset_id": DATASET,
        "inner_steps": 8,
        "trace_interval": 2,
        "compression_policy": "topk:0.016+int4",
        "participants_per_round": 2,
        "num_shards": 4,
        "tokens_per_step": 1024,
        "commit_blocks": 3,
        "reveal_blocks": 2,
        "verdict_blocks": 3,
        "attest_blocks": 2,
        "min_reputation": 0,
        "min_stake": 0,
        "challenge_bps": 10_000,
        "verifiers_per_challenge": 1,
        "segments_per_challenge": 1,
        "determinism_mode": jobs_pb2.DETERMINISM_MODE_TOLERANCE,
        "tolerance_ppm": 1_000,
    }
    d.update(kw)
    return jobs_pb2.JobSpec(**d)


def create_job_msg(
    rounds: int = 2, reward: int = 1_000_000, vreward: int = 100_000, **spec: Any
) -> tx_pb2.Msg:
    return tx_pb2.Msg(
        create_job=jobs_pb2.MsgCreateJob(
            spec=job_spec(**spec),
            rounds=rounds,
            reward_per_round=reward,
            verifier_reward_per_round=vreward,
        )
    )


def cancel_msg(job_id: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(cancel_job=jobs_pb2.MsgCancelJob(job_id=job_id))


def trace_states(
    addr: bytes, job_id: int, round_: int, n_entries: int, tag: str = ""
) -> list[bytes]:
    return [honest_state(addr, job_id, round_, i, tag) for i in range(n_entries)]


def honest_state(addr: bytes, job_id: int, round_: int, i: int, tag: str = "") -> bytes:
    """State hash of trace entry ``i`` of an honest provider's trace: what re-executing its
    segment ``i - 1`` yields (the kits' stand-in for re-execution)."""
    return h(f"{addr.hex()}/{job_id}/{round_}/{i}{tag}")


def trace_leaves(
    addr: bytes, job_id: int, round_: int, base: bytes = MODEL0, n_entries: int = 5
) -> list[bytes]:
    """Leaf data of an honest provider's bound trace tree (abci_app.merkle layout: trace entry i
    is leaf entry_leaf(i))."""
    return bound_trace_leaves(
        addr, job_id, round_, base, trace_states(addr, job_id, round_, n_entries)
    )


def honest_probe(addr: bytes, job_id: int, round_: int, i: int) -> list[int]:
    """The committed probe of trace entry ``i`` of an honest provider's trace (the kits' stand-in
    for trainer.probe: a count-sketch of the step's displacement, here PROBE_DIM pseudo-random
    integers of about 2^40; entry 0 all zeros)."""
    if i == 0:
        return [0] * PROBE_DIM
    seed = h(f"probe/{addr.hex()}/{job_id}/{round_}/{i}")
    out = []
    for j in range(PROBE_DIM):
        x = int.from_bytes(hashlib.sha256(seed + bytes([j])).digest()[:6], "big")
        out.append(x - (1 << 47))
    return out


def probe_leaves(
    addr: bytes, job_id: int, round_: int, base: bytes = MODEL0, n_entries: int = 5
) -> list[bytes]:
    """Leaf data of an honest provider's bound probe tree (the trace's layout: leaf 0 the probe
    binding leaf, then encode_probe of entry i as leaf i + 1)."""
    return [binding_leaf(b"probe", addr, job_id, round_, base)] + [
        encode_probe(honest_probe(addr, job_id, round_, i)) for i in range(n_entries)
    ]


def update_leaves(addr: bytes, job_id: int, round_: int, base: bytes = MODEL0) -> list[bytes]:
    """Leaf data of an honest provider's bound update tree (a 123,456-byte payload = 1 chunk,
    stood for by a 32-byte string)."""
    return bound_update_leaves(addr, job_id, round_, base, h(f"update/{addr.hex()}/{round_}"))


def submit_msg(
    addr: bytes,
    job_id: int,
    round_: int,
    base: bytes = MODEL0,
    *,
    n_entries: int = 5,
    tokens: int = 8192,
    probe: bool = True,
    **kw: Any,
) -> tx_pb2.Msg:
    """An honest submission: the roots bound to ``addr`` (leaf 0 = its binding leaf) with the
    proofs of leaf 0 (a base that is not 32 bytes gets placeholder roots: the chain refuses it
    with 506 before it looks at them). ``probe`` (tolerance mode, the kits' default job): with
    the probe root of ``probe_leaves``; ``probe=False`` for an exact-mode job."""
    ul = update_leaves(addr, job_id, round_, base) if len(base) == 32 else [b"u"]
    tl = trace_leaves(addr, job_id, round_, base, n_entries) if len(base) == 32 else [b"t"]
    pl = probe_leaves(addr, job_id, round_, base, n_entries) if len(base) == 32 else [b"p"]
    d: dict[str, Any] = {
        "job_id": job_id,
        "round": round_,
        "base_model_hash": base,
        "update_root": merkle_root(ul),
        "payload_size": 123_456,
        "trace_root": merkle_root(tl),
        "tokens_processed": tokens,
        "loss_before_mnats": 5_500,
        "loss_after_mnats": 5_200,
        "blob_location": f"http://10.0.0.1:26680/blob/{addr.hex()[:8]}",
        "update_binding_proof": merkle_proof(ul, BINDING_INDEX),
        "trace_binding_proof": merkle_proof(tl, BINDING_INDEX),
    }
    if probe:
        d.update(probe_root=merkle_root(pl), probe_binding_proof=merkle_proof(pl, BINDING_INDEX))
    d.update(kw)
    return tx_pb2.Msg(submit_update=jobs_pb2.MsgSubmitUpdate(**d))


def reveal_msg(
    addr: bytes,
    job_id: int,
    round_: int,
    segment: int,
    *,
    n_entries: int = 5,
    base: bytes = MODEL0,
    **kw: Any,
) -> tx_pb2.Msg:
    """Reveal trace entries ``segment`` and ``segment + 1`` = leaves ``entry_leaf(segment)`` and
    ``entry_leaf(segment + 1)`` of the bound trace, with the trace list (the entries, leaves
    1.., concatenated) and its sha256. The end is opened by its leaf hash only (both modes), its
    state hash stays secret, and the list holds the secret ends of the challenged ``segments``
    (default: this one) as leaf hashes (incentives.mask_trace). A segment whose predecessor is
    in ``segments`` opens its start by its leaf hash too (``start_leaf_hash``; no start hash or
    location): only a run's start is public. (``exact`` is accepted and ignored: both modes
    reveal alike.)"""
    kw.pop("exact", None)
    segments = list(kw.pop("segments", [segment]))
    # a later panel's fresh segment (panel > 0): runs over every segment that panel judges
    # (``judged``), the list named by hash only (the first opening proved it)
    panel = int(kw.pop("panel", 0))
    judged = list(kw.pop("judged", segments))
    tl = list(kw.pop("leaves", None) or trace_leaves(addr, job_id, round_, base, n_entries))
    s, e = entry_leaf(segment), entry_leaf(segment + 1)
    hidden = compute_masked_entries(segments, n_entries - 1)
    trace_list = b"".join(mask_trace(tl[1:], hidden))
    d: dict[str, Any] = {
        "job_id": job_id,
        "round": round_,
        "segment": segment,
        "start_proof": merkle_proof(tl, s),
        "end_proof": merkle_proof(tl, e),
        "trace_list_hash": hashlib.sha256(trace_list).digest(),
        "trace_list": trace_list if panel == 0 else b"",
        "end_leaf_hash": hash_leaf(tl[e]),
        "panel": panel,
    }
    if is_run_start(segment, judged):
        d.update(start_state_hash=tl[s], start_location="http://10.0.0.1:26680/s/a")
    else:
        d.update(start_leaf_hash=hash_leaf(tl[s]))
    d.update(kw)
    return tx_pb2.Msg(reveal_segment=jobs_pb2.MsgRevealSegment(**d))


def open_end_msg(
    addr: bytes,
    job_id: int,
    round_: int,
    segment: int,
    *,
    n_entries: int = 5,
    base: bytes = MODEL0,
    **kw: Any,
) -> tx_pb2.Msg:
    """Tolerance mode, vote-reveal window: open the end of ``segment`` (its state hash and its
    committed probe, proven against the probe root of ``probe_leaves``)."""
    tl = trace_leaves(addr, job_id, round_, base, n_entries)
    pl = probe_leaves(addr, job_id, round_, base, n_entries)
    e = entry_leaf(segment + 1)
    d: dict[str, Any] = {
        "job_id": job_id,
        "round": round_,
        "segment": segment,
        "end_state_hash": tl[e],
        "end_location": "http://10.0.0.1:26680/s/b",
        "probe": honest_probe(addr, job_id, round_, segment + 1),
        "probe_proof": merkle_proof(pl, e),
    }
    d.update(kw)
    return tx_pb2.Msg(open_end=jobs_pb2.MsgOpenEnd(**d))


def vote_salt(verifier: bytes, job_id: int, round_: int, target: bytes) -> bytes:
    return h(f"salt/{verifier.hex()}/{job_id}/{round_}/{target.hex()}")


def reached_states(
    r: jobs_pb2.Round,
    target: jobs_pb2.Participant,
    valid: bool,
    diligent: bool = True,
    panel: int = 0,
) -> list[bytes]:
    """The end states a verifier's re-execution of each opened segment reaches (segment order):
    the honest trace's entries when the segments are right, other states when they are not.
    ``diligent=False`` is a lazy verifier that did not re-execute: it has only public data, the
    revealed end state hashes (tolerance mode) or, in exact mode where those are secret, a
    public entry when another opening starts there (only a run's start is: never the end of an
    opened segment), else a guess. A diligent invalid vote of a later panel (``panel`` > 0)
    diverges on the earlier panels' segments (the cheat they disputed) and reaches the honest
    end of each of its panel's fresh segments, as a re-execution of the kits' honest trace does:
    its evidence is checked there (rounds.apply_evidence_checks)."""
    opened = compute_panel_reveals(target, panel)
    out = []
    for o in opened:
        if diligent:
            x = honest_state(target.address, r.job_id, r.round, o.segment + 1)
        else:
            starts = {q.segment: q.start_state_hash for q in opened}
            x = o.end_state_hash or starts.get(o.segment + 1) or h(f"guess/{o.segment}")
        keep = valid or (diligent and panel > 0 and o.panel == panel)
        out.append(x if keep else hashlib.sha256(b"recomputed" + x).digest())
    return out


def reached_probes(
    r: jobs_pb2.Round,
    target: jobs_pb2.Participant,
    diligent: bool = True,
    noise_ppm: int = 100,
    panel: int = 0,
) -> list[int]:
    """Tolerance mode: the probes of the end states a verifier's re-execution reaches (PROBE_DIM
    per opened segment, segment order). Diligent: the honest probe with every component off by
    ``noise_ppm`` millionths (another stack's floats; the default 100 ppm is 10x under the kits'
    1,000 ppm tolerance); lazy (``diligent=False``): what public data gives, the probe of the
    segment before (extrapolating the previous step), which it cannot know either."""
    out: list[int] = []
    for o in compute_panel_reveals(target, panel):
        i = o.segment + 1 if diligent else o.segment
        p = honest_probe(target.address, r.job_id, r.round, i)
        out.extend(x + x * noise_ppm // 1_000_000 for x in p)
    return out


def vote_evidence(
    target: jobs_pb2.Participant, valid: bool, r: jobs_pb2.Round | None = None
) -> bytes:
    """compute_evidence of ``reached_states`` (a diligent verifier)."""
    rr = r or jobs_pb2.Round(job_id=1, round=0)
    return compute_evidence(reached_states(rr, target, valid))


def verdict_msg(job_id: int, round_: int, target: bytes, vote_hash: bytes) -> tx_pb2.Msg:
    return tx_pb2.Msg(
        verdict=jobs_pb2.MsgVerdict(job_id=job_id, round=round_, target=target, vote_hash=vote_hash)
    )


def reveal_vote_msg(
    job_id: int,
    round_: int,
    target: bytes,
    valid: bool,
    quality: int,
    evidence: bytes,
    salt: bytes,
    reached: list[bytes] | tuple[bytes, ...] = (),
) -> tx_pb2.Msg:
    return tx_pb2.Msg(
        reveal_vote=jobs_pb2.MsgRevealVote(
            job_id=job_id,
            round=round_,
            target=target,
            valid=valid,
            quality=quality,
            evidence=evidence,
            salt=salt,
            reached=list(reached),
        )
    )


def vote_msgs(
    r: jobs_pb2.Round,
    target: bytes,
    verifier: bytes,
    valid: bool = True,
    quality: int = 8_000,
    diligent: bool = True,
    noise_ppm: int = 100,
    tolerance: bool = True,
    panel: int = 0,
) -> tuple[tx_pb2.Msg, tx_pb2.Msg]:
    """(MsgVerdict, MsgRevealVote) of one secret vote on ``target``'s revealed segments, with the
    states the verifier reached as evidence (``reached_states``; ``diligent=False``: a lazy
    verifier's, from public data only: refused on opening a valid vote in exact mode).
    ``tolerance`` (the kits' default job): a blind vote (incentives.compute_blind_vote_hash) over
    the probes of ``reached_probes``; a lazy verifier's valid vote then counts as invalid."""
    t = next(p for p in r.participants if p.address == target)
    if tolerance:
        probes = reached_probes(r, t, diligent, noise_ppm, panel)
        ev = compute_probe_evidence(probes)
        salt = vote_salt(verifier, r.job_id, r.round, target)
        q = quality if valid else 0
        hsh = compute_blind_vote_hash(r.job_id, r.round, target, verifier, ev, salt)
        opening = reveal_vote_msg(r.job_id, r.round, target, valid, q, ev, salt)
        opening.reveal_vote.probes.extend(probes)
        return verdict_msg(r.job_id, r.round, target, hsh), opening
    reached = reached_states(r, t, valid, diligent, panel)
    ev = compute_evidence(reached)
    salt = vote_salt(verifier, r.job_id, r.round, target)
    q = quality if valid else 0
    hsh = compute_vote_hash(r.job_id, r.round, target, verifier, valid, q, ev, salt)
    return verdict_msg(r.job_id, r.round, target, hsh), reveal_vote_msg(
        r.job_id, r.round, target, valid, q, ev, salt, reached
    )


# a ``vote`` callback's answer for "I could not fetch the revealed states"
# (MsgRevealVote.unavailable)
UNAVAILABLE = "unavailable"


def unavailable_vote_msgs(
    r: jobs_pb2.Round, target: bytes, verifier: bytes
) -> tuple[tx_pb2.Msg, tx_pb2.Msg]:
    """(MsgVerdict, MsgRevealVote) of an unavailable vote on ``target`` (either mode)."""
    salt = vote_salt(verifier, r.job_id, r.round, target)
    hsh = compute_vote_hash(
        r.job_id, r.round, target, verifier, False, 0, UNAVAILABLE_EVIDENCE, salt, True
    )
    opening = reveal_vote_msg(r.job_id, r.round, target, False, 0, UNAVAILABLE_EVIDENCE, salt)
    opening.reveal_vote.unavailable = True
    return verdict_msg(r.job_id, r.round, target, hsh), opening


def attest_msg(
    job_id: int, round_: int, model_hash: bytes, excluded: list[bytes] | None = None
) -> tx_pb2.Msg:
    """``excluded`` as given (not sorted: tests send bad orders too)."""
    return tx_pb2.Msg(
        attest_model=jobs_pb2.MsgAttestModel(
            job_id=job_id, round=round_, model_hash=model_hash, excluded=list(excluded or ())
        )
    )


@dataclass
class Market:
    chain: Chain
    owner: Ed25519Signer
    providers: list[Ed25519Signer] = field(default_factory=list)
    # committed votes the actors will open: (job, round, target, verifier) -> MsgRevealVote
    pending_votes: dict[tuple[int, int, bytes, bytes], tx_pb2.Msg] = field(default_factory=dict)
    # lazy votes (built from public data only): their opening may be refused, and that is the point
    lazy_votes: set[tuple[int, int, bytes, bytes]] = field(default_factory=set)
    # bound trace leaves a test committed by hand: (job, round, provider) -> leaves; the actors
    # open a later panel's fresh segments from them (default: the honest trace)
    traces: dict[tuple[int, int, bytes], list[bytes]] = field(default_factory=dict)

    @property
    def height(self) -> int:
        return self.chain.store.height

    @property
    def store(self):
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

    def create_job(self, **kw: Any) -> None:
        """The owner creates a job (``create_job_msg``'s arguments); it must be accepted."""
        res = self.send(self.owner, create_job_msg(**kw))
        assert res.code == 0, res.log

    def tx(self, k: Ed25519Signer, *msgs: tx_pb2.Msg) -> bytes:
        """A signed tx with k's next sequence (for ``chainkit.assert_rejected(m.chain, m.tx(...),
        Err)``)."""
        return self.chain.tx(k, list(msgs))

    def tx_pair(
        self, k: Ed25519Signer, first: tx_pb2.Msg, second: tx_pb2.Msg
    ) -> tuple[bytes, bytes]:
        """Two txs of ``k`` for one block (its next two sequences), the first already through
        CheckTx (as in a mempool) so that the second's CheckTx runs after it: for
        ``assert_rejected(m.chain, b, Err, before=[a])`` when ``second`` must land in the block
        of ``first`` (e.g. ``first`` is the last message its phase waits for: the phase then ends
        early, rounds.close_if_done, and a later block is past it)."""
        a = self.chain.tx(k, [first])
        res = self.chain.check(a)
        assert res.code == 0, res.log
        return a, self.chain.tx(k, [second], seq=self.chain.seqs.get(k.address, 0) + 1)


# The market tests assert what the protocol pays, refunds and slashes to the uloco, so their
# chains run without the fee floor (txs still go through the same ante step, paying 0);
# fees themselves are charged and tested by the chainkit / stakekit tests and tests/auth, and a
# market under the default floor by tests/jobs/test_market_fees.py (``fee_floor=True``).
NO_FEE_FLOOR = {"min_fee_per_byte": 0, "min_fee_per_msg": 0}


def new_market(
    n_providers: int = 3,
    n_keys: int = 8,
    register: bool = True,
    bonds: list[int] | None = None,
    fee_floor: bool = False,
    jobs_params: dict[str, int] | None = None,
    providers_params: dict[str, int] | None = None,
) -> Market:
    """``fee_floor``: the chain's default minimum fee (every tx pays exactly it) instead of none;
    ``jobs_params`` / ``providers_params``: genesis params overrides (e.g.
    ``{"audit_bps": 10_000}``) over the kit's own (``chainkit.KIT_JOBS_PARAMS``,
    ``chainkit.KIT_PROVIDERS_PARAMS``: reputations from 5,000 without a floor, draws that take
    every provider a job asks for)."""
    # key 0 is the owner: n_providers more keys at least (n_providers=8 once gave 7 silently)
    c = new_chain(
        n_keys=max(n_keys, 1 + n_providers),
        auth_params=None if fee_floor else NO_FEE_FLOOR,
        jobs_params={**KIT_JOBS_PARAMS, **(jobs_params or {})},
        providers_params={**KIT_PROVIDERS_PARAMS, **(providers_params or {})},
    )
    m = Market(c, c.keys[0], list(c.keys[1 : 1 + n_providers]))
    if register:
        bonds = bonds or [BOND] * n_providers
        m.block([(k, register_msg(b)) for k, b in zip(m.providers, bonds, strict=True)])
    return m


def agg_hash(job_id: int, round_: int) -> bytes:
    return h(f"aggregate/{job_id}/{round_}")


def honest_vote(verifier: bytes, target: bytes) -> tuple[bool, int] | None:
    return True, 8_000


# the panel that commits its votes in a phase, and the one that opens them
VOTE_PANEL = {jobs_pb2.PHASE_VERDICT: 0, jobs_pb2.PHASE_APPEAL: 1, jobs_pb2.PHASE_FINAL: 2}
OPEN_PANEL = {
    jobs_pb2.PHASE_VOTE_REVEAL: 0,
    jobs_pb2.PHASE_APPEAL_REVEAL: 1,
    jobs_pb2.PHASE_FINAL_REVEAL: 2,
}


Tx = tuple[Ed25519Signer, tx_pb2.Msg]  # (signer, message) of one tx in an actors block


def actors_block(
    m: Market,
    job_id: int,
    *,
    skip_commit: frozenset[bytes] = frozenset(),
    skip_reveal: frozenset[bytes] = frozenset(),
    skip_open_end: frozenset[bytes] = frozenset(),
    skip_fresh: frozenset[bytes] = frozenset(),
    vote: Any = honest_vote,
    attest: Any = None,
) -> abci.ResponseFinalizeBlock:
    """One block in which every drawn provider does its duty for every live round of the job,
    except as told: ``vote(verifier, target) -> (valid, quality[, diligent[, noise_ppm]]) | None``
    | UNAVAILABLE (None = silent; UNAVAILABLE = an unavailable vote; diligent False = a lazy
    verifier's evidence, whose opening may be refused;
    noise_ppm: how far a diligent tolerance-mode probe is off the provider's; asked
    once per assignment, first panel in the verdict window, appeal panel in the appeal window,
    final panel in the final window; the vote is committed then and opened in the next window),
    ``attest(addr, job, round) -> hash | None``. Tolerance mode: challenged providers open their
    ends (MsgOpenEnd) in the vote-reveal window, except those in ``skip_open_end``."""
    attest = attest or (lambda a, j, r: agg_hash(j, r))
    txs: list[Tx] = []
    refusable: set[int] = set()  # indexes in txs of lazy votes' openings
    exact = m.job(job_id).spec.determinism_mode == jobs_pb2.DETERMINISM_MODE_EXACT
    ne = compute_n_segments(m.job(job_id).spec) + 1  # trace entries
    for r in jobs_keeper.iterate_rounds(m.store, job_id):
        if r.phase == jobs_pb2.PHASE_COMMIT:
            txs += _commit_txs(m, r, exact, ne, skip_commit)
        elif r.phase == jobs_pb2.PHASE_REVEAL:
            txs += _reveal_txs(m, r, exact, ne, skip_reveal)
        elif r.phase in VOTE_PANEL:
            txs += _vote_txs(m, r, exact, skip_fresh, vote)
        elif r.phase in OPEN_PANEL:
            opened, lazy = _open_txs(m, r, exact, ne, skip_open_end)
            refusable |= {len(txs) + i for i in lazy}
            txs += opened
        elif r.phase == jobs_pb2.PHASE_ATTEST:
            txs += _attest_txs(m, r, attest)
    resp = m.block(txs)
    for i, ((k, msg), res) in enumerate(zip(txs, resp.tx_results, strict=True)):
        if i in refusable:
            continue
        assert res.code == 0, f"{msg.WhichOneof('sum')} by {k.address.hex()[:8]} failed: {res.log}"
    return resp


def _commit_txs(
    m: Market, r: jobs_pb2.Round, exact: bool, ne: int, skip: frozenset[bytes]
) -> list[Tx]:
    """Commit window: each participant not yet committed (and not in ``skip``) submits."""
    return [
        (
            m.key(p.address),
            submit_msg(
                p.address, r.job_id, r.round, r.base_model_hash, probe=not exact, n_entries=ne
            ),
        )
        for p in r.participants
        if not p.HasField("commitment") and p.address not in skip
    ]


def _reveal_txs(
    m: Market, r: jobs_pb2.Round, exact: bool, ne: int, skip: frozenset[bytes]
) -> list[Tx]:
    """Reveal window: each challenged participant (not in ``skip``) reveals the segments it has
    not opened yet."""
    txs: list[Tx] = []
    for p in r.participants:
        if p.challenged and not p.HasField("reveal") and p.address not in skip:
            opened = {o.segment for o in p.reveals}
            txs.extend(
                (
                    m.key(p.address),
                    reveal_msg(
                        p.address,
                        r.job_id,
                        r.round,
                        sg,
                        base=r.base_model_hash,
                        exact=exact,
                        segments=list(p.segments),
                        n_entries=ne,
                    ),
                )
                for sg in p.segments
                if sg not in opened
            )
    return txs


def _vote_txs(
    m: Market, r: jobs_pb2.Round, exact: bool, skip_fresh: frozenset[bytes], vote: Any
) -> list[Tx]:
    """A panel's vote window: a later panel's fresh segments are opened first (voted on the
    next block); else the panel's verifiers commit their votes."""
    panel = VOTE_PANEL[r.phase]
    txs: list[Tx] = []
    for p in r.participants:
        if p.challenged and p.HasField("reveal"):
            fresh = fresh_reveal_msgs(m, r, p, panel, exact)
            if fresh:  # a later panel's fresh segments: opened first, voted next block
                if p.address not in skip_fresh:
                    txs.extend((m.key(p.address), x) for x in fresh)
                continue
            txs += _panel_votes(m, r, p, panel, exact, vote)
    return txs


def _panel_votes(
    m: Market, r: jobs_pb2.Round, p: jobs_pb2.Participant, panel: int, exact: bool, vote: Any
) -> list[Tx]:
    """The committed votes of ``panel``'s verifiers on ``p``, as ``vote`` chooses them; their
    openings wait in ``m.pending_votes`` (lazy ones also in ``m.lazy_votes``)."""
    txs: list[Tx] = []
    for v in p.verifiers:
        if v.panel == panel and not v.vote_hash:
            choice = vote(v.address, p.address)
            if choice == UNAVAILABLE:
                commit, open_ = unavailable_vote_msgs(r, p.address, v.address)
                m.pending_votes[(r.job_id, r.round, p.address, v.address)] = open_
                txs.append((m.key(v.address), commit))
            elif choice is not None:
                extra = list(choice[2:])
                commit, open_ = vote_msgs(
                    r,
                    p.address,
                    v.address,
                    choice[0],
                    choice[1],
                    extra[0] if extra else True,
                    extra[1] if len(extra) > 1 else 100,
                    tolerance=not exact,
                    panel=panel,
                )
                key = (r.job_id, r.round, p.address, v.address)
                m.pending_votes[key] = open_
                if len(choice) > 2 and not choice[2]:
                    m.lazy_votes.add(key)
                txs.append((m.key(v.address), commit))
    return txs


def _open_txs(
    m: Market, r: jobs_pb2.Round, exact: bool, ne: int, skip_open_end: frozenset[bytes]
) -> tuple[list[Tx], set[int]]:
    """A panel's vote-reveal window: in tolerance mode the judged participants open their ends;
    the panel's verifiers open their pending votes. With the indexes of lazy votes' openings."""
    panel = OPEN_PANEL[r.phase]
    txs: list[Tx] = []
    lazy: set[int] = set()
    for p in r.participants:
        if (
            not exact
            and p.challenged
            and p.HasField("reveal")
            and p.verifiers  # only a judged challenge's ends are due (is_end_due)
            and p.address not in skip_open_end
        ):
            txs.extend(
                (
                    m.key(p.address),
                    open_end_msg(
                        p.address,
                        r.job_id,
                        r.round,
                        o.segment,
                        base=r.base_model_hash,
                        n_entries=ne,
                    ),
                )
                for o in p.reveals
                if not o.end_opened_height and o.panel == panel
            )
        for v in p.verifiers:
            key = (r.job_id, r.round, p.address, v.address)
            if v.panel == panel and v.vote_hash and not v.voted and key in m.pending_votes:
                txs.append((m.key(v.address), m.pending_votes.pop(key)))
                if key in m.lazy_votes:
                    lazy.add(len(txs) - 1)
    return txs, lazy


def _attest_txs(m: Market, r: jobs_pb2.Round, attest: Any) -> list[Tx]:
    """Attest window: each accepted participant attests the hash ``attest`` gives (None: not)."""
    txs: list[Tx] = []
    for p in r.participants:
        if p.outcome == jobs_pb2.OUTCOME_ACCEPTED and not p.attested_hash:
            hsh = attest(p.address, r.job_id, r.round)
            if hsh is not None:
                txs.append((m.key(p.address), attest_msg(r.job_id, r.round, hsh)))
    return txs


def fresh_reveal_msgs(
    m: Market, r: jobs_pb2.Round, p: jobs_pb2.Participant, panel: int, exact: bool
) -> list[tx_pb2.Msg]:
    """The MsgRevealSegment of each fresh segment drawn for ``panel`` (1 appeal, 2 final) that
    ``p`` has not opened yet (none for the first panel, or once all are open)."""
    if panel == 0 or p.outcome == jobs_pb2.OUTCOME_MISSED_REVEAL:
        return []
    opened = {o.segment for o in p.reveals}
    return [
        reveal_msg(
            p.address,
            r.job_id,
            r.round,
            sg,
            base=r.base_model_hash,
            n_entries=compute_n_segments(m.job(r.job_id).spec) + 1,
            segments=list(p.segments),
            judged=compute_panel_segments(p, panel),
            panel=panel,
            leaves=m.traces.get((r.job_id, r.round, p.address)),
        )
        for sg in compute_fresh_segments(p, panel)
        if sg not in opened
    ]


class OddVoter:
    """A ``vote`` for ``actors_block``/``run_job``: the first verifier asked votes ``odd``, every
    other one ``rest``; ``address`` is that first verifier (None until a vote is asked)."""

    def __init__(self, odd: tuple[bool, int], rest: tuple[bool, int]) -> None:
        self.odd, self.rest = odd, rest
        self.address: bytes | None = None

    def __call__(self, verifier: bytes, target: bytes) -> tuple[bool, int]:
        if self.address is None:
            self.address = verifier
        return self.odd if verifier == self.address else self.rest


def run_job(
    m: Market, job_id: int, max_blocks: int = 500, **kw: Any
) -> list[abci.ResponseFinalizeBlock]:
    """Drive the job with actors_block until it is closed; returns the block responses."""
    out: list[abci.ResponseFinalizeBlock] = []
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
PHASE_ORDER = [
    jobs_pb2.PHASE_OPEN,
    jobs_pb2.PHASE_COMMIT,
    jobs_pb2.PHASE_CHALLENGE,
    jobs_pb2.PHASE_REVEAL,
    jobs_pb2.PHASE_VERDICT,
    jobs_pb2.PHASE_VOTE_REVEAL,
    jobs_pb2.PHASE_APPEAL,
    jobs_pb2.PHASE_APPEAL_REVEAL,
    jobs_pb2.PHASE_FINAL,
    jobs_pb2.PHASE_FINAL_REVEAL,
    jobs_pb2.PHASE_ATTEST,
    jobs_pb2.PHASE_FINALIZED,
]
PHASE_END = PHASE_END_FIELD  # the chain's one phase table


def job_in_phase(phase: int, n_providers: int = 3, **job_kw: Any) -> tuple[Market, jobs_pb2.Round]:
    """Drive job 1 round 0 with honest actors until it reaches ``phase`` (jobs_pb2.PHASE_REVEAL,
    PHASE_VERDICT, PHASE_VOTE_REVEAL or PHASE_ATTEST); the actors act for the phases before it
    only."""
    m, _r = job_in_commit(n_providers, **job_kw)
    while PHASE_ORDER.index(m.round(1, 0).phase) < PHASE_ORDER.index(phase):
        before = m.round(1, 0).phase
        actors_block(m, 1)
        # a phase whose messages are all in closes early (rounds.close_if_done), maybe in this
        # very block: the actors then act in the next phase at once instead of waiting its window
        r = m.round(1, 0)
        if r.phase == before:
            m.until(getattr(r, PHASE_END[r.phase]))
    return m, m.round(1, 0)


def non_participant(m: Market, r: jobs_pb2.Round) -> Ed25519Signer:
    drawn = {p.address for p in r.participants}
    return next(k for k in m.providers if k.address not in drawn)
