"""Verification on the network's path at the shipped job defaults: honest providers never
rejected, every cheat caught at the rate the formula gives, and verifier vs provider compute.

    nice -n 10 .venv/bin/python benchmarks/verification.py --results benchmarks/RESULTS.md

What runs (tiny model, synthetic corpus, CPU): n = H/k = ``--n`` (480) segments with k = 1, and
the challenge settings ``loconet tx job create`` ships, read from node/client/market_msgs.py at run
time
(``DEFAULT_SEGMENTS_PER_CHALLENGE`` = s, ``DEFAULT_CHALLENGE_BPS`` = c: 1 segment, 5 % of
commitments since issue 29; ``--s 15 --challenge-bps 10000`` gives the old ones), in both
determinism modes (``--modes``: exact, the same stack; tolerance ``--tolerance`` 1e-3).

Every challenge judged here runs what a verifier runs on the network (node/worker/worker.py
``judge`` and ``judge_opened_ends``): ``ml.verify_round(..., base=...)`` with the round's base
model bytes, so trace entry 0 of the fresh round is *built* from the base
(``trainer.state.fresh_start_state``, ``verify_fresh_start``), never served: the served states
leave it out, so a verifier that fetched it would reject every honest round here; the end of each
opened segment is secret (``incentives.compute_hidden_entries``, the served trace list masked),
re-executed on the secret-end path, and in tolerance mode judged once opened
(``verify_opened_end`` with the provider's committed probe).

1. **Faked steps.** For each cheat that fakes steps (skipped steps relabelled, half batches,
   bf16 instead of fp32, another shard, a replayed older state) and each f in ``--fs``
   (1, 10, 100 %), a provider trace of n segments in which m = ceil(f·n) segments (seeded
   positions) are faked and the rest are honest continuations. In each mode the real verifier
   (``trainer.verify.verify_segment``) judges every faked segment and ``--honest-sample``
   honest ones. Then ``--rounds`` challenges are drawn exactly as the chain draws them
   (``abci_app.jobs.audit.draw_segments`` on a ``Sampler`` seeded per round; challenged when
   ``below(10000) < challenge_bps``), a round catching the provider when a drawn segment failed;
   consecutive rounds are grouped in threes. Measured rates are printed next to the formula of
   abci_app/jobs/README.md (exact, and the chain's ``compute_catch_bps``) with a binomial z.
   The first ``--judged-faked`` challenged rounds, and the first ``--judged-faked`` caught ones,
   are also judged on the network path: its verdict must be the simulated one.
2. **Start and payload cheats** (poisoned payload, payload x26, a peer's payload re-wrapped,
   made-up start moments, a trace from another base model): the first ``--judged`` challenged
   rounds judged on the network path, per mode; these checks run in every challenge before any
   segment, so a round catches the cheat when it is challenged.
3. **Honest providers.** Every segment of an honest trace judged, exact mode (same stack) and
   tolerance mode (a provider stepping in float64, checkpointing in float32): rejections must be
   0; the ``--rounds`` drawn rounds over it; and at least ``--honest-rounds`` challenged rounds
   judged on the network path (fresh start built, payload, the drawn segment, its opened end).
4. **Compute.** CPU time (``time.process_time``) of one provider round (``commit_round``: H
   steps, trace, compression) vs what one verifier runs per challenge on the network (the
   challenge above, then the quality score of a valid vote, ``ml.quality``); means over
   ``--reps`` challenges. Expected share of the provider's compute = c x that, x (1 + audit_bps
   /10⁴ x audit_verifiers) for the panel audits (an audited challenge's first panel has
   ``--audit-verifiers`` more seats, with probability ``--audit-bps``). ``--compute-only`` runs
   this part alone and records its rows as a dated subsection.

``--results`` writes (or replaces) the section headed ``HEAD`` in that RESULTS.md, appended at
the end when missing; the older *Verification* section (s = 15, every commitment challenged,
entry 0 served) is left as it is.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import hashlib
import json
import math
import os
import platform
import sys
import time
from collections.abc import Iterator
from fractions import Fraction
from math import comb
from pathlib import Path

import torch

from abci_app.jobs.audit import compute_catch_bps, compute_faked_segments, draw_segments
from abci_app.jobs.incentives import compute_hidden_entries, mask_trace
from abci_app.jobs.params import DEFAULTS as JOBS_PARAMS
from abci_app.jobs.sampler import Sampler
from abci_app.merkle import hash_leaf
from node.client import market_msgs
from node.worker import ml
from trainer.carry import load_carry
from trainer.commit import KIND_STATE, Binding, decode, encode, trace_root, update_root
from trainer.compression import Codec, make_codec
from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import DetRNG, set_determinism, stack_id
from trainer.diloco import RoundArtifacts, Worker, commit_round, params_of
from trainer.model import GPTConfig, init_model
from trainer.probe import compute_probe
from trainer.state import InnerConfig, load_state, model_hash, model_payload, run_inner_steps
from trainer.verify import (
    Challenge,
    VerifyContext,
    rerun_segment,
    verify_opened_end,
    verify_segment,
)

HEAD = (
    "## Verification at the shipped defaults, on the network's path "
    "(benchmarks/verification.py, issue 29)"
)
CODEC = "topk:0.05+int8"
ICFG = InnerConfig()
STEP_CHEATS = (
    "skipped steps",
    "half batches",
    "bf16 instead of fp32",
    "another shard",
    "replayed older state",
)
MODES = ("exact", "tolerance")


def relabel(state: bytes, steps: int) -> bytes:
    p = decode(state, expected_kind=KIND_STATE)
    p.meta["inner_step"] += steps
    p.meta["adam_step"] += steps
    return encode(p)


def honest_next(state: bytes, spec: ShardSpec, corpus: Corpus, k: int) -> bytes:
    ls = load_state(state)
    run_inner_steps(ls.model, ls.opt, ls.icfg, corpus, spec, ls.inner_step, k)
    return ls.to_bytes(inner_step=ls.inner_step + k)


def fake(cheat: str, states: list[bytes], spec: ShardSpec, corpus: Corpus, k: int) -> bytes:
    s = states[-1]
    if cheat == "skipped steps":
        return relabel(s, k)  # no step done, labelled as k
    if cheat == "half batches":
        return rerun_segment(
            s, ShardSpec(**{**spec.to_dict(), "batch_size": spec.batch_size // 2}), k, corpus
        )
    if cheat == "bf16 instead of fp32":
        return rerun_segment(s, spec, k, corpus, torch.bfloat16)
    if cheat == "another shard":
        other = ShardSpec(**{**spec.to_dict(), "shard": (spec.shard + 1) % spec.n_shards})
        return rerun_segment(s, other, k, corpus)
    if cheat == "replayed older state":
        old = states[-3] if len(states) >= 3 else states[0]
        steps = decode(s).meta["inner_step"] + k - decode(old).meta["inner_step"]
        return relabel(old, steps)
    raise ValueError(cheat)


def committed(states: list[bytes], binding: Binding, codec: Codec, carry: bytes) -> RoundArtifacts:
    """What a provider whose trace is ``states`` commits and serves (as ``commit_round``): the
    trace hashes and the payload compress(θ_0 − θ_H + e_prev) of the trace's own ends."""
    p0, ph = (decode(states[i], expected_kind=KIND_STATE) for i in (0, -1))
    delta = {nm: p0.entries[nm].parts["param"] - ph.entries[nm].parts["param"] for nm in p0.entries}
    payload = encode(codec.compress(delta, load_carry(carry)))
    trace = [hashlib.sha256(s).digest() for s in states]
    return RoundArtifacts(
        states=list(states),
        trace=trace,
        carry=carry,
        payload=payload,
        binding=binding,
        trace_root=trace_root(trace, binding),
        update_root=update_root(payload, binding),
    )


def network_challenge(segs: list[int], art: RoundArtifacts) -> Challenge:
    """The challenge as the network's verifier holds it (node/worker/worker.py ``judge``): the
    end of each opened segment is secret (``incentives.compute_hidden_entries``: only its leaf
    hash is opened, and the served trace list holds it as that leaf hash, ``mask_trace``), so it
    is re-executed on the secret-end path; entry 0 of the fresh round is **not served** (the
    verifier builds it from the base model), entry H/k and the opened starts are."""
    n = len(art.trace) - 1
    hidden = compute_hidden_entries(segs, n)
    need = ({n} | {i for sg in segs for i in (sg, sg + 1)}) - hidden - {0}
    return Challenge(
        segments=segs,
        trace=mask_trace(list(art.trace), hidden),
        states={i: art.states[i] for i in need},
        carry=art.carry,
        trace_root=art.trace_root,
        update_root=art.update_root,
        binding=art.binding,
        payload=art.payload,
        hidden={i: hash_leaf(art.trace[i]) for i in hidden},
    )


@dataclasses.dataclass
class Judged:
    valid: bool
    reason: str
    t_round: float  # CPU s in ml.verify_round
    t_open: float  # CPU s judging the opened ends (tolerance mode)
    reexecuted: dict[int, str]  # segment -> re-executed end hash (hex)


def judge(
    plan: ml.JobPlan,
    spec: ShardSpec,
    art: RoundArtifacts,
    segs: list[int],
    *,
    base: bytes,
    corpus: Corpus,
) -> Judged:
    """One challenge judged as a network verifier judges it: ``ml.verify_round`` with the base
    model bytes (entry 0 built, not served), then in tolerance mode every secret end once opened
    (``verify_opened_end`` against the kept re-execution, with the provider's committed probe)."""
    ch = network_challenge(segs, art)
    n = len(art.trace) - 1
    # the provider's committed probes of the opened ends (its own work, not timed)
    probes = {
        sg + 1: compute_probe(art.states[sg], art.states[sg + 1]) for sg in segs if sg + 1 < n
    }
    t0 = time.process_time()
    v = ml.verify_round(
        plan,
        spec,
        segments=ch.segments,
        trace=ch.trace,
        states=ch.states,
        carry=ch.carry,
        payload=ch.payload,
        trace_root=ch.trace_root,
        update_root=ch.update_root,
        binding=ch.binding,
        corpus=corpus,
        hidden=ch.hidden,
        base=base,
    )
    t_round = time.process_time() - t0
    reexec = {sg: sv.reexecuted_hash for sg, sv in v.segments.items()}
    if not v.valid:
        return Judged(False, v.reason, t_round, 0.0, reexec)
    t0 = time.process_time()
    if plan.tolerance is not None:
        for sg in sorted(segs):
            if sg + 1 not in ch.hidden:
                continue
            # the opened start: a run's start was served (entry 0: built, and valid above means
            # its hash is trace entry 0, so it is the provider's), any other is the previous
            # opened end
            judge_end = functools.partial(
                verify_opened_end,
                art.states[sg],
                tolerance=plan.tolerance,
                end_leaf=hash_leaf(art.trace[sg + 1]),
                claimed_probe=probes[sg + 1],
                tolerance_ppm=round(plan.tolerance * 1e6),
            )
            ov = judge_end(v.segments[sg].reexecuted_state, art.states[sg + 1])
            if not ov.valid and sg - 1 in segs:
                # inside a run our re-execution started from our own state: as the worker's
                # judge_opened_ends, re-execute once from the provider's opened start, which
                # decides
                fresh = ml.reexecute_segment(plan, spec, art.states[sg], corpus=corpus)
                if fresh is not None:
                    ov = judge_end(fresh, art.states[sg + 1])
            if not ov.valid:
                return Judged(
                    False,
                    f"opened end of segment {sg}: {ov.reason}",
                    t_round,
                    time.process_time() - t0,
                    reexec,
                )
    return Judged(True, v.reason, t_round, time.process_time() - t0, reexec)


def draw(tag: str, r: int, n: int, s: int, c_bps: int) -> list[int]:
    """The chain's challenge draw for round ``r`` of one provider ([] = not challenged)."""
    smp = Sampler(hashlib.sha256(f"bench/{tag}/{r}".encode()).digest())
    return draw_segments(smp, n, s) if smp.below(10_000) < c_bps else []


def draws(tag: str, rounds: int, n: int, s: int, c_bps: int) -> list[list[int]]:
    return [draw(tag, r, n, s, c_bps) for r in range(rounds)]


def challenged(tag: str, n: int, s: int, c_bps: int) -> Iterator[list[int]]:
    """The challenged rounds' draws, in round order, without end."""
    r = 0
    while True:
        d = draw(tag, r, n, s, c_bps)
        r += 1
        if d:
            yield d


def rates(caught: list[bool]) -> tuple[float, float]:
    """(per-round catch rate, rate of 3-round windows with at least one catch)."""
    wins = [any(caught[i : i + 3]) for i in range(0, len(caught) - 2, 3)]
    return sum(caught) / len(caught), sum(wins) / len(wins)


def catch_p(n: int, s: int, c_bps: int, f_bps: int, rounds: int) -> float:
    """The formula (docs/threat-model.md *Enough segments*), exact:
    1 − (1 − c·(1 − C(n−m, s')/C(n, s')))^R."""
    m, k = compute_faked_segments(n, f_bps), min(s, n)
    miss = 1 - Fraction(c_bps, 10_000) * (1 - Fraction(comb(n - m, k), comb(n, k)))
    return float(1 - miss**rounds)


def z_of(measured: float, p: float, trials: int) -> float:
    sd = math.sqrt(p * (1 - p) / trials) if 0 < p < 1 else 0.0
    return (measured - p) / sd if sd else 0.0


def reexecutions_per_challenge(audit_bps: int, audit_verifiers: int) -> float:
    """Expected re-executions of an honest challenge: the first panel's one verifier (the CLI
    default) and, when the challenge is audited (``audit_bps``), ``audit_verifiers`` more; the
    same factor ``node.client.market_msgs.expected_verifier_compute_bps`` applies to the steps."""
    return (10_000 + audit_bps * audit_verifiers) / 10_000


def command_line() -> str:
    nice = os.nice(0)
    return (f"nice -n {nice} " if nice else "") + " ".join(
        [".venv/bin/python", "benchmarks/verification.py", *sys.argv[1:]]
    )


def machine() -> dict:
    return {
        "nproc": os.cpu_count(),
        "arch": platform.machine(),
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
        "stack": stack_id(),
    }


# long: a flat table of the benchmark's flags, each with its help text
def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: nice -n 10 .venv/bin/python benchmarks/verification.py "
        "--results benchmarks/RESULTS.md",
    )
    ap.add_argument(
        "--n", type=int, default=480, help="segments per trace H/k (default 480, k = 1)"
    )
    ap.add_argument(
        "--s",
        type=int,
        default=market_msgs.DEFAULT_SEGMENTS_PER_CHALLENGE,
        help="segments per challenge (default: node/client/market_msgs.py "
        f"DEFAULT_SEGMENTS_PER_CHALLENGE, now {market_msgs.DEFAULT_SEGMENTS_PER_CHALLENGE}; "
        "15 = the old default)",
    )
    ap.add_argument(
        "--challenge-bps",
        type=int,
        default=market_msgs.DEFAULT_CHALLENGE_BPS,
        help="share of commitments challenged, bps (default: node/client/market_msgs.py "
        f"DEFAULT_CHALLENGE_BPS, now {market_msgs.DEFAULT_CHALLENGE_BPS}; 10000 = the old "
        "default)",
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=200_000,
        help="simulated rounds per faked-steps row and per start/payload cheat (draws are cheap; "
        "default 200000)",
    )
    ap.add_argument(
        "--fs",
        default="100,1000,10000",
        help="fake fractions f of the faked-steps rows, bps (default: 1, 10, 100 %%)",
    )
    ap.add_argument(
        "--modes", default=",".join(MODES), help="determinism modes (default exact,tolerance)"
    )
    ap.add_argument(
        "--judged",
        type=int,
        default=200,
        help="start/payload cheats: challenged rounds judged on the network path, per cheat and "
        "mode (default 200)",
    )
    ap.add_argument(
        "--judged-faked",
        type=int,
        default=10,
        help="faked steps: the first challenged rounds and the first caught ones (this many "
        "each) judged on the network path, which must agree with the simulation (default 10)",
    )
    ap.add_argument(
        "--honest-rounds",
        type=int,
        default=200,
        help="honest: challenged rounds judged on the network path per mode (default 200)",
    )
    ap.add_argument(
        "--honest-sample", type=int, default=20, help="honest segments judged per cheat trace"
    )
    ap.add_argument("--reps", type=int, default=5, help="verifier challenges timed")
    ap.add_argument(
        "--provider-reps",
        type=int,
        default=1,
        help="provider rounds timed per row (mean; more steadies the ratio on a loaded machine)",
    )
    ap.add_argument(
        "--compute",
        default="tiny:1,tiny:4,small:1",
        help="MODEL:k pairs timed for verifier vs provider compute (n and s fixed)",
    )
    ap.add_argument(
        "--compute-only",
        action="store_true",
        help="time only the compute rows (part 4, a few minutes); with --results, record them as "
        "a dated subsection of the section headed HEAD instead of rewriting it",
    )
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument(
        "--audit-bps",
        type=int,
        default=JOBS_PARAMS["audit_bps"],
        help="chain param: a challenge is audited with this probability "
        f"(default {JOBS_PARAMS['audit_bps']})",
    )
    ap.add_argument(
        "--audit-verifiers",
        type=int,
        default=JOBS_PARAMS["audit_verifiers"],
        help="chain param: an audited challenge's extra first-panel seats, each re-executing it "
        f"(default {JOBS_PARAMS['audit_verifiers']})",
    )
    ap.add_argument(
        "--results",
        help="write/replace the section headed HEAD of this RESULTS.md (appended when missing; "
        "the older 'Verification' section is left alone)",
    )
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a = ap.parse_args()
    if any(m not in MODES for m in a.modes.split(",") if m):
        ap.error(f"--modes: {MODES}")
    return a


@dataclasses.dataclass
class Bench:
    """What every part of the run shares: the flags, the corpus, the tiny model's round (its
    spec, base parameters and bytes, binding) and the codec."""

    a: argparse.Namespace
    t_wall: float  # perf_counter at the start (the log's clock, the run's seconds)
    corpus: Corpus
    cfg: GPTConfig
    n: int
    s: int
    c: int
    k: int
    tol: float
    fs: list[int]
    modes: list[str]
    spec: ShardSpec
    base: dict[str, torch.Tensor]
    base_bytes: bytes  # what every verifier holds: the round's base model
    bind: Binding
    codec: Codec

    @property
    def mode_tol(self) -> dict[str, float | None]:
        return {"exact": None, "tolerance": self.tol}

    @property
    def audit_factor(self) -> float:
        return reexecutions_per_challenge(self.a.audit_bps, self.a.audit_verifiers)

    def plan_of(self, ccfg: GPTConfig, ck: int, cspec: ShardSpec, mtol: float | None) -> ml.JobPlan:
        return ml.JobPlan(
            job_id=1,
            model=ccfg,
            inner=ICFG,
            H=self.n * ck,
            k=ck,
            batch_size=cspec.batch_size,
            n_shards=cspec.n_shards,
            dataset_id=self.corpus.id,
            policy=CODEC,
            tokens_per_step=cspec.batch_size * ccfg.block_size,
            tolerance=mtol,
        )

    def log(self, msg: str) -> None:
        print(f"[{time.perf_counter() - self.t_wall:6.0f} s] {msg}", file=sys.stderr, flush=True)


def setup(a: argparse.Namespace, t_wall: float) -> Bench:
    set_determinism(0, threads=1)
    corpus = Corpus(synthetic_text(200_000, seed=7))
    cfg = GPTConfig.preset("tiny")
    spec = ShardSpec(
        dataset_id=corpus.id,
        seed=3,
        job=1,
        round=0,
        provider="A",
        block_size=cfg.block_size,
        shard=5,
    )
    base = params_of(init_model(cfg, 0))
    m0 = init_model(cfg, 0)
    base_bytes = encode(model_payload(m0))
    bind = Binding(hashlib.sha256(b"A").digest()[:20], 1, 0, model_hash(m0))
    assert hashlib.sha256(base_bytes).digest() == bind.base_model_hash
    return Bench(
        a=a,
        t_wall=t_wall,
        corpus=corpus,
        cfg=cfg,
        n=a.n,
        s=a.s,
        c=a.challenge_bps,
        k=1,
        tol=a.tolerance,
        fs=[int(x) for x in a.fs.split(",") if x],
        modes=[m for m in a.modes.split(",") if m],
        spec=spec,
        base=base,
        base_bytes=base_bytes,
        bind=bind,
        codec=make_codec(CODEC),
    )


def run_record(b: Bench, load_start: tuple[float, float, float]) -> dict:
    """The run's settings and where it ran (the section's header)."""
    a = b.a
    return {
        "config": {
            "n": b.n,
            "s": b.s,
            "challenge_bps": b.c,
            "shipped": {
                "s": market_msgs.DEFAULT_SEGMENTS_PER_CHALLENGE,
                "challenge_bps": market_msgs.DEFAULT_CHALLENGE_BPS,
            },
            "k": b.k,
            "rounds": a.rounds,
            "fs_bps": b.fs,
            "modes": b.modes,
            "tolerance": b.tol,
            "model": "tiny",
            "codec": CODEC,
            "audit_bps": a.audit_bps,
            "audit_verifiers": a.audit_verifiers,
            "judged": a.judged,
            "judged_faked": a.judged_faked,
            "honest_rounds": a.honest_rounds,
        },
        "command": command_line(),
        "machine": machine(),
        "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "load_start": load_start,
    }


def probes_cpu_s(art: RoundArtifacts) -> float:
    """CPU s of the probes a tolerance-mode provider commits with every trace entry (the
    worker's trace_probes); timed apart, the compute ratios leave it out of the provider's side."""
    t0 = time.process_time()
    prev = decode(art.states[0], expected_kind=KIND_STATE)
    for st in art.states[1:]:
        cur = decode(st, expected_kind=KIND_STATE)
        compute_probe(prev, cur)
        prev = cur
    return time.process_time() - t0


def compute_row(b: Bench, preset: str, ck: int) -> tuple[dict, RoundArtifacts]:
    """Part 4 for one (model, k): a provider round vs a verifier's challenge (the challenge,
    the opened ends, the quality score) in CPU s; returns the row and the provider's round."""
    a, n = b.a, b.n
    ccfg = GPTConfig.preset(preset)
    cspec = ShardSpec(**{**b.spec.to_dict(), "block_size": ccfg.block_size})
    cm0 = init_model(ccfg, 0)
    cbase = encode(model_payload(cm0))
    cbind = Binding(b.bind.provider, 1, 0, model_hash(cm0))
    t_prov: list[float] = []

    def provider_round() -> RoundArtifacts:
        t0 = time.process_time()
        art = commit_round(
            Worker("A", ccfg, ICFG, "cpu"),
            params_of(cm0),
            b.corpus,
            cspec,
            n * ck,
            ck,
            b.codec,
            cbind,
        )
        t_prov.append(time.process_time() - t0)
        return art

    # the provider rounds are spread between the timed challenges (the first before them),
    # so that both sides see the same load on a shared machine
    n_prov = max(1, a.provider_reps)
    prov_at = {round(i * a.reps / n_prov) for i in range(1, n_prov)}
    art = provider_round()
    t_probes = probes_cpu_s(art)
    plan = b.plan_of(ccfg, ck, cspec, b.tol)
    t_ver, t_open, t_qual = [], [], []
    for rep in range(a.reps):
        if rep in prov_at:
            provider_round()  # same trace: the round is deterministic
        segs = draw_segments(Sampler(f"time/{rep}".encode()), n, b.s)
        jv = judge(plan, cspec, art, segs, base=cbase, corpus=b.corpus)
        assert jv.valid, jv.reason
        assert all(bytes.fromhex(jv.reexecuted[sg]) == art.trace[sg + 1] for sg in segs)
        t_ver.append(jv.t_round)
        t_open.append(jv.t_open)
        # a valid vote carries the update's quality (the worker's ml.quality)
        t0 = time.process_time()
        ml.quality(plan, cbase, art.payload, b.corpus)
        t_qual.append(time.process_time() - t0)
    while len(t_prov) < n_prov:  # more provider rounds than challenges
        provider_round()
    t_provider = sum(t_prov) / len(t_prov)
    tv, to, tq = (sum(x) / len(x) for x in (t_ver, t_open, t_qual))
    total = tv + to + tq
    fixed = market_msgs.FIXED_STEPS_PER_SEGMENT
    c, af = b.c, b.audit_factor
    steps = c / 1e4 * min(b.s, n) / n * af
    share = c / 1e4 * af * total / t_provider
    row = {
        "model": preset,
        "params": cm0.num_params(),
        "k": ck,
        "H": n * ck,
        "provider_round_s": t_provider,
        "provider_probes_s": t_probes,
        "verifier_challenge_s": tv,
        "verifier_opened_ends_s": to,
        "verifier_quality_s": tq,
        "verifier_total_s": total,
        "ratio": total / t_provider,
        "ratio_with_audits": af * total / t_provider,
        "expected_share": share,
        "steps_share": steps,
        "model_share": steps * (ck + fixed) / ck,
    }
    b.log(
        f"compute {preset} k={ck}: provider {t_provider:.2f} s (+ probes {t_probes:.2f} s), "
        f"verifier {total:.3f} s (challenge {tv:.3f} + opened ends {to:.3f} + quality "
        f"{tq:.3f}) = {100 * total / t_provider:.2f} % per challenge; expected share at "
        f"c = {c / 100:g} % with audits {100 * share:.3f} %"
    )
    return row, art


def compute_rows(b: Bench) -> tuple[list[dict], RoundArtifacts | None]:
    """4. Compute: a provider round vs a verifier challenge, per (model, k) with n and s fixed.
    Also returns the tiny model's round at the benchmark's k (the honest trace parts 1-3 use),
    when one was timed."""
    compute = []
    honest = None
    for item in b.a.compute.split(","):
        preset, _, kk = item.partition(":")
        ck = int(kk or 1)
        row, art = compute_row(b, preset, ck)
        compute.append(row)
        if preset == "tiny" and ck == b.k and honest is None:
            honest = art
    return compute, honest


def honest_row(b: Bench, honest: RoundArtifacts, mode: str) -> dict:
    """3. Honest, one mode: every segment judged, the drawn rounds, the network path."""
    n, k, spec, corpus = b.n, b.k, b.spec, b.corpus
    mtol = b.mode_tol[mode]
    if mode == "exact":
        hart = honest
    else:  # a provider stepping in float64, checkpointing in float32
        tol_states = [honest.states[0]]
        for _ in range(n):
            tol_states.append(rerun_segment(tol_states[-1], spec, k, corpus, torch.float64))
        hart = committed(tol_states, b.bind, b.codec, honest.carry)
    rej = [
        i
        for i in range(n)
        if not verify_segment(
            VerifyContext(corpus, spec, k, tolerance=mtol), hart.states[i], hart.states[i + 1]
        ).valid
    ]
    rounds = draws(f"honest/{mode}", b.a.rounds, n, b.s, b.c)
    caught = [any(i in rej for i in d) for d in rounds]
    plan = b.plan_of(b.cfg, k, spec, mtol)
    net_rej: list[str] = []
    net_segs: set[int] = set()
    gen = challenged(f"honest/{mode}", n, b.s, b.c)
    for _ in range(b.a.honest_rounds):
        segs = next(gen)
        net_segs.update(segs)
        jv = judge(plan, spec, hart, segs, base=b.base_bytes, corpus=corpus)
        if not jv.valid:
            net_rej.append(f"{segs}: {jv.reason}")
    return {
        "mode": mode,
        "provider": "same stack" if mode == "exact" else "float64 steps, float32 states",
        "segments": n,
        "rejected_segments": len(rej),
        "rounds": b.a.rounds,
        "challenged_rounds": sum(bool(d) for d in rounds),
        "rejected_rounds": sum(caught),
        "network_rounds": b.a.honest_rounds,
        "network_segments": len(net_segs),
        "network_rejected": len(net_rej),
        "network_reasons": net_rej[:5],
    }


def honest_rows(b: Bench, honest: RoundArtifacts) -> list[dict]:
    rows = []
    for mode in b.modes:
        rows.append(honest_row(b, honest, mode))
        b.log(f"honest {mode}: {rows[-1]}")
    return rows


@dataclasses.dataclass
class FakedTrace:
    """One (cheat, f) trace of part 1: the faked positions, the states, their commitment, the
    honest segments sampled, and the rounds drawn over it."""

    cheat: str
    f: int
    m: int  # faked segments (compute_faked_segments)
    pos: set[int]
    states: list[bytes]
    art: RoundArtifacts
    sample: list[int]
    rounds: list[list[int]]


def faked_trace(b: Bench, honest: RoundArtifacts, cheat: str, f: int) -> FakedTrace:
    n, spec, corpus, k = b.n, b.spec, b.corpus, b.k
    m = compute_faked_segments(n, f)
    pos = set(DetRNG("bench-faked", cheat, f).shuffle(list(range(n)))[:m])
    states = [honest.states[0]]
    for i in range(n):
        states.append(
            fake(cheat, states, spec, corpus, k)
            if i in pos
            else honest_next(states[-1], spec, corpus, k)
        )
    fart = committed(states, b.bind, b.codec, honest.carry)
    sample = DetRNG("bench-honest", cheat, f).shuffle(sorted(set(range(n)) - pos))[
        : b.a.honest_sample
    ]
    rounds = draws(f"{cheat}/{f}", b.a.rounds, n, b.s, b.c)
    return FakedTrace(cheat, f, m, pos, states, fart, sample, rounds)


def network_agreement(
    b: Bench, ft: FakedTrace, plan: ml.JobPlan, caught: list[bool]
) -> tuple[int, int, list[str], int]:
    """The network path on the first challenged rounds and the first caught ones: (judged,
    agreeing with the simulation, the disagreements, how many of them were caught)."""
    first = [r for r, d in enumerate(ft.rounds) if d][: b.a.judged_faked]
    hits = [r for r, x in enumerate(caught) if x][: b.a.judged_faked]
    agree = judged = 0
    disagree: list[str] = []
    for r in sorted(set(first) | set(hits)):
        jv = judge(plan, b.spec, ft.art, ft.rounds[r], base=b.base_bytes, corpus=b.corpus)
        judged += 1
        if jv.valid != (not caught[r]):
            disagree.append(f"round {r} {ft.rounds[r]}: {jv.reason}")
        else:
            agree += 1
    return judged, agree, disagree, len([r for r in set(first) | set(hits) if caught[r]])


def faked_row(b: Bench, ft: FakedTrace, mode: str) -> dict:
    """1. One faked-steps row: the faked segments and the sampled honest ones judged in
    ``mode``, the drawn rounds' catch rates against the formula, the network path's verdicts."""
    n, s, c, k = b.n, b.s, b.c, b.k
    mtol = b.mode_tol[mode]
    pos, states, f = ft.pos, ft.states, ft.f
    bad = {
        i
        for i in range(n)
        if (i in pos or i in ft.sample)
        and not verify_segment(
            VerifyContext(b.corpus, b.spec, k, tolerance=mtol), states[i], states[i + 1]
        ).valid
    }
    fp = len(bad - pos)
    caught = [any(i in bad for i in d) for d in ft.rounds]
    r1, r3 = rates(caught)
    judged, agree, disagree, net_caught = network_agreement(
        b, ft, b.plan_of(b.cfg, k, b.spec, mtol), caught
    )
    p1, p3 = catch_p(n, s, c, f, 1), catch_p(n, s, c, f, 3)
    row = {
        "mode": mode,
        "cheat": ft.cheat,
        "f_bps": f,
        "faked_segments": ft.m,
        "faked_rejected": len(bad & pos),
        "honest_sampled": len(ft.sample),
        "honest_rejected": fp,
        "caught_rounds": sum(caught),
        "caught_1": r1,
        "caught_3": r3,
        "formula_1": p1,
        "formula_3": p3,
        "chain_bps_1": compute_catch_bps(n, s, c, f, 1),
        "chain_bps_3": compute_catch_bps(n, s, c, f, 3),
        "z_1": z_of(r1, p1, len(caught)),
        "z_3": z_of(r3, p3, len(caught) // 3),
        "network_judged": judged,
        "network_caught": net_caught,
        "network_agree": agree,
        "network_disagree": disagree[:5],
    }
    b.log(
        f"{mode:9s} {ft.cheat:22s} f={f / 100:5g}%  faked {len(bad & pos)}/{ft.m} "
        f"rejected, honest {fp}/{len(ft.sample)}; caught 1 round {100 * r1:.4f} % "
        f"(formula {100 * p1:.4f} %, z {row['z_1']:+.2f}), 3 rounds "
        f"{100 * r3:.4f} % (formula {100 * p3:.4f} %); network path {agree}/{judged} "
        "agree"
    )
    return row


def faked_rows(b: Bench, honest: RoundArtifacts) -> list[dict]:
    """1. Faked steps: one trace per (cheat, f), judged in each mode."""
    rows = []
    for cheat in STEP_CHEATS:
        for f in b.fs:
            ft = faked_trace(b, honest, cheat, f)
            rows += [faked_row(b, ft, mode) for mode in b.modes]
            del ft
    return rows


def start_cases(b: Bench, honest: RoundArtifacts) -> dict[str, RoundArtifacts]:
    """2. The start and payload cheats, each as the round it commits."""
    cfg, spec, bind, codec = b.cfg, b.spec, b.bind, b.codec
    peer = commit_round(
        Worker("B", cfg, ICFG, "cpu"),
        b.base,
        b.corpus,
        ShardSpec(**{**spec.to_dict(), "provider": "B", "shard": 9}),
        20,
        20,
        codec,
        Binding(hashlib.sha256(b"B").digest()[:20], 1, 0, bind.base_model_hash),
    )
    p0, ph = (decode(honest.states[i], expected_kind=KIND_STATE) for i in (0, -1))
    delta = {nm: p0.entries[nm].parts["param"] - ph.entries[nm].parts["param"] for nm in p0.entries}
    g = torch.Generator().manual_seed(0)

    def with_payload(d: dict[str, torch.Tensor] | None = None, raw: bytes | None = None):
        p = raw if d is None else encode(codec.compress(d, load_carry(honest.carry)))
        assert p is not None
        return dataclasses.replace(honest, payload=p, update_root=update_root(p, bind))

    other_base = commit_round(
        Worker("A", cfg, ICFG, "cpu"),
        params_of(init_model(cfg, 99)),
        b.corpus,
        spec,
        b.n * b.k,
        b.k,
        codec,
        bind,
    )
    made_up = decode(honest.states[0], expected_kind=KIND_STATE)
    for e in made_up.entries.values():
        e.parts["exp_avg"] = torch.full_like(e.parts["exp_avg"], 1e-3)
    made_up_art = committed([encode(made_up), *honest.states[1:]], bind, codec, honest.carry)
    made_up_art = dataclasses.replace(
        made_up_art, payload=honest.payload, update_root=honest.update_root
    )
    return {
        "honest trace + poisoned payload": with_payload(
            {nm: torch.randn(t.shape, generator=g) * 0.05 for nm, t in delta.items()}
        ),
        "honest trace + payload x26": with_payload({nm: 26 * t for nm, t in delta.items()}),
        "a peer's payload re-wrapped": with_payload(raw=peer.payload),
        "made-up start moments": made_up_art,
        "a trace from another base model": other_base,
    }


def start_row(b: Bench, name: str, art: RoundArtifacts, rounds: list[list[int]], mode: str):
    """2. One start/payload row: the network path on the first challenged rounds."""
    c = b.c
    plan = b.plan_of(b.cfg, b.k, b.spec, b.mode_tol[mode])
    judged = failed = 0
    where: set[str] = set()
    for segs in [d for d in rounds if d][: b.a.judged]:
        jv = judge(plan, b.spec, art, segs, base=b.base_bytes, corpus=b.corpus)
        judged += 1
        failed += not jv.valid
        where.add(jv.reason.split(" (")[0] if not jv.valid else "passed")
    # checks 1-2 run before any segment and do not depend on the draw: every challenge
    # fails when the judged ones all did
    caught = [bool(d) and failed == judged for d in rounds]
    r1, r3 = rates(caught)
    p1, p3 = c / 1e4, 1 - (1 - c / 1e4) ** 3
    b.log(
        f"{mode:9s} {name:32s} {failed}/{judged} failed ({'; '.join(sorted(where))}); "
        f"caught 1 round {100 * r1:.3f} % (c = {100 * p1:g} %), 3 rounds {100 * r3:.3f} %"
    )
    return {
        "mode": mode,
        "cheat": name,
        "judged": judged,
        "failed": failed,
        "check": "; ".join(sorted(where)),
        "challenged_rounds": sum(bool(d) for d in rounds),
        "caught_1": r1,
        "caught_3": r3,
        "formula_1": p1,
        "formula_3": p3,
        "z_1": z_of(r1, p1, len(caught)),
    }


def start_rows(b: Bench, honest: RoundArtifacts) -> list[dict]:
    rows = []
    for name, art in start_cases(b, honest).items():
        rounds = draws(f"start/{name}", b.a.rounds, b.n, b.s, b.c)
        rows += [start_row(b, name, art, rounds, mode) for mode in b.modes]
    return rows


def main() -> int:
    a = parse_args()
    t_wall = time.perf_counter()
    load_start = os.getloadavg()
    b = setup(a, t_wall)
    out = run_record(b, load_start)
    out["compute"], honest = compute_rows(b)
    if a.compute_only:
        out["seconds"] = time.perf_counter() - t_wall
        md = render_compute(out)
        if a.results:
            add_compute_record(Path(a.results), md)
        print(json.dumps(out, indent=1) if a.output == "json" else md)
        return 0
    if honest is None:
        honest = commit_round(
            Worker("A", b.cfg, ICFG, "cpu"),
            b.base,
            b.corpus,
            b.spec,
            b.n * b.k,
            b.k,
            b.codec,
            b.bind,
        )
    # the benchmark's own commit of a trace is the provider's
    assert committed(honest.states, b.bind, b.codec, honest.carry).payload == honest.payload
    out["honest"] = honest_rows(b, honest)
    out["faked_steps"] = faked_rows(b, honest)
    out["start_payload"] = start_rows(b, honest)
    out["seconds"] = time.perf_counter() - t_wall
    out["load_end"] = os.getloadavg()
    md = render(out)
    if a.results:
        write_section(Path(a.results), md)
    print(json.dumps(out, indent=1) if a.output == "json" else md)
    return 0


def pct(x: float, nd: int = 2) -> str:
    return f"{100 * x:.{nd}f} %"


def header(o: dict) -> list[str]:
    cf, mc = o["config"], o["machine"]
    l0 = " / ".join(f"{x:.1f}" for x in o.get("load_start", ()))
    l1 = " / ".join(f"{x:.1f}" for x in o.get("load_end", os.getloadavg()))
    shipped = cf["shipped"]
    at_defaults = (cf["s"], cf["challenge_bps"]) == (shipped["s"], shipped["challenge_bps"])
    return [
        f"Command: `{o['command']}` ({o['seconds']:.0f} s wall, {o['date']}). Machine: "
        f"`nproc` {mc['nproc']}, {mc['arch']}, {mc['torch_threads']} torch thread(s), Python "
        f"{mc['python']}, stack `{mc['stack']}`; shared with other work: load average {l0} at "
        f"the start, {l1} at the end (1/5/15 min). Times are this process's CPU time "
        "(`time.process_time`).",
        "",
        f"Settings: n = H/k = {cf['n']} segments (k = {cf['k']}), s = {cf['s']} segment(s) per "
        f"challenge, challenge_bps {cf['challenge_bps']} ("
        + (
            "the shipped defaults, read from node/client/market_msgs.py at run time"
            if at_defaults
            else f"not the shipped {shipped['s']} / {shipped['challenge_bps']}"
        )
        + f"), audit_bps {cf['audit_bps']} x {cf['audit_verifiers']} seat(s); tiny model, codec "
        f"`{cf['codec']}`; tolerance mode {cf['tolerance']:g}. Every judged challenge is the "
        "network's path (node/worker/worker.py `judge`): `ml.verify_round(..., base=...)` with "
        "the round's base model bytes, so trace entry 0 is built "
        "(`trainer.state.fresh_start_state`) and **never served** (the benchmark leaves it out "
        "of the served states); opened ends secret, re-executed, and in tolerance mode judged "
        "once opened (`verify_opened_end`, the provider's probe). Challenges drawn as the chain "
        f"draws them; {cf['rounds']:,} simulated rounds per row, {cf['rounds'] // 3:,} windows "
        "of 3. Formula: docs/threat-model.md *Enough segments*.",
    ]


def render(o: dict) -> str:
    cf = o["config"]
    lines = [HEAD, "", *header(o), ""]
    lines += [
        "**Honest providers** (exact mode: the same stack; tolerance mode: a provider stepping "
        "in float64 and checkpointing in float32). Every segment judged "
        "(`verify_segment`), the drawn rounds over them, and the first challenged rounds "
        "judged whole on the network path (fresh start built, payload, drawn segment, opened "
        "end):",
        "",
        "| mode | provider | segments judged | rejected | simulated rounds (challenged) | "
        "rejected | challenged rounds judged on the network path (distinct segments) | "
        "rejected |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in o["honest"]:
        lines.append(
            f"| {r['mode']} | {r['provider']} | {r['segments']} | **{r['rejected_segments']}** "
            f"| {r['rounds']:,} ({r['challenged_rounds']:,}) | **{r['rejected_rounds']}** | "
            f"{r['network_rounds']} ({r['network_segments']}) | **{r['network_rejected']}** |"
        )
    lines += [
        "",
        "**Start and payload cheats** (checks 1–2 run in every challenge before any segment, "
        "so a round catches the cheat when it is challenged: formula = c). The first "
        f"{cf['judged']} challenged rounds of each judged on the network path:",
        "",
        "| mode | cheat | judged challenges failed | failing check | caught, 1 round (formula) "
        "| within 3 rounds (formula) |",
        "|---|---|---:|---|---:|---:|",
    ]
    for r in o["start_payload"]:
        lines.append(
            f"| {r['mode']} | {r['cheat']} | **{r['failed']}/{r['judged']}** | {r['check']} | "
            f"{pct(r['caught_1'])} ({pct(r['formula_1'])}) | {pct(r['caught_3'])} "
            f"({pct(r['formula_3'])}) |"
        )
    lines += [
        "",
        "**Faked steps**: a trace with m = ⌈f·n⌉ faked segments per row, every faked segment "
        "and honest ones sampled from the same trace judged in each mode; measured catch rate "
        "over the simulated rounds next to the formula (exact; the chain's `compute_catch_bps` "
        "floors it to whole bps) and z = (measured − formula) / binomial sd. Network path: the "
        f"first {cf['judged_faked']} challenged rounds and the first {cf['judged_faked']} caught "
        "ones judged whole, its verdict equal to the simulated one.",
        "",
        "| mode | cheat | f | faked segments rejected | honest sampled rejected | caught, 1 round "
        "(formula; z) | within 3 rounds (formula; z) | network path = simulation (caught) |",
        "|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in o["faked_steps"]:
        lines.append(
            f"| {r['mode']} | {r['cheat']} | {r['f_bps'] / 100:g} % | "
            f"{r['faked_rejected']}/{r['faked_segments']} | "
            f"{r['honest_rejected']}/{r['honest_sampled']} | {pct(r['caught_1'], 3)} "
            f"({pct(r['formula_1'], 3)}; {r['z_1']:+.1f}) | {pct(r['caught_3'], 3)} "
            f"({pct(r['formula_3'], 3)}; {r['z_3']:+.1f}) | "
            f"{r['network_agree']}/{r['network_judged']} ({r['network_caught']}) |"
        )
    lines += ["", chain_catch(o)]
    lines += ["", *compute_intro(o), "", *compute_table(o), "", *reading(o), ""]
    return "\n".join(lines)


def chain_catch(o: dict) -> str:
    """The chain's own catch figures (``compute_catch_bps``, floored to whole bps) per f."""
    cf = o["config"]
    return (
        "The chain's `compute_catch_bps` at these settings (floored to whole bps): "
        + "; ".join(
            f"f = {f / 100:g} %: {compute_catch_bps(cf['n'], cf['s'], cf['challenge_bps'], f, 1)} "
            f"bps a round, {compute_catch_bps(cf['n'], cf['s'], cf['challenge_bps'], f, 3)} "
            "within 3"
            for f in cf["fs_bps"]
        )
        + "."
    )


def compute_intro(o: dict) -> list[str]:
    cf = o["config"]
    fac = reexecutions_per_challenge(cf["audit_bps"], cf["audit_verifiers"])
    return [
        f"**Verifier compute at these settings** (n = {cf['n']}, s = {cf['s']}, c = "
        f"{cf['challenge_bps'] / 100:g} %): provider round = `commit_round` (H steps, a state "
        "hash every k steps, compression; its tolerance-mode probes of every entry are left out "
        "and listed below); verifier per challenge = one network-path challenge as above "
        "(fresh start built, trace root, payload re-compressed, s segments re-executed, opened "
        "ends judged) + the quality score of a valid vote (`ml.quality`), mean of "
        "the timed challenges. Expected share = c x per challenge x "
        f"{fac:g} (panel audits: {cf['audit_bps']} bps x {cf['audit_verifiers']} seat(s)). The "
        "model column is node/client/market_msgs.py's `expected_verifier_work_bps` in floating "
        "point "
        "(re-executed steps c·s/n x audits, plus `FIXED_STEPS_PER_SEGMENT` step per opened "
        "segment; the chain's integer version floors it to whole bps).",
    ]


def compute_table(o: dict) -> list[str]:
    cf = o["config"]
    fac = reexecutions_per_challenge(cf["audit_bps"], cf["audit_verifiers"])
    lines = [
        "| model (params) | k | H | provider round | verifier per challenge = challenge + "
        f"opened ends + quality | per challenge / provider round | x {fac:g} (audits) | "
        f"**expected share at c = {cf['challenge_bps'] / 100:g} %** | model: steps (+ fixed "
        "work) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for cp in o["compute"]:
        lines.append(
            f"| {cp['model']} ({cp['params']:,}) | {cp['k']} | {cp['H']} | "
            f"{cp['provider_round_s']:.2f} s | {cp['verifier_total_s']:.3f} s = "
            f"{cp['verifier_challenge_s']:.3f} + {cp['verifier_opened_ends_s']:.3f} + "
            f"{cp['verifier_quality_s']:.3f} s | {pct(cp['ratio'])} | "
            f"{pct(cp['ratio_with_audits'])} | **{pct(cp['expected_share'], 3)}** | "
            f"{pct(cp['steps_share'], 4)} ({pct(cp['model_share'], 4)}) |"
        )
    lines += [
        "",
        "Provider probes (`trace_probes`, not in the ratios): "
        + ", ".join(
            f"{cp['model']} k = {cp['k']}: {cp['provider_probes_s']:.2f} s" for cp in o["compute"]
        )
        + ".",
    ]
    return lines


def _reading_honest(o: dict) -> str:
    hon = o["honest"]
    bad_h = [r for r in hon if r["rejected_segments"] or r["rejected_rounds"]]
    bad_h += [r for r in hon if r["network_rejected"]]
    return (
        "Reading: **honest providers** "
        + (
            "were never rejected: "
            if not bad_h
            else "were REJECTED in some rows (see the table; reasons: "
            + "; ".join(x for r in hon for x in r["network_reasons"])
            + "): "
        )
        + ", ".join(
            f"{r['mode']} mode {r['rejected_segments']} of {r['segments']} segments, "
            f"{r['network_rejected']} of {r['network_rounds']} challenged rounds on the network "
            "path"
            for r in hon
        )
        + ", with entry 0 built from the base in every one of them."
    )


def _reading_start(o: dict) -> str:
    cf = o["config"]
    sp = o["start_payload"]
    all_sp = all(r["failed"] == r["judged"] > 0 for r in sp)
    return (
        "**Start and payload cheats** "
        + (
            "failed every judged challenge"
            if all_sp
            else "did NOT fail every judged challenge: "
            + ", ".join(
                f"{r['mode']} {r['cheat']} {r['failed']}/{r['judged']}"
                for r in sp
                if r["failed"] != r["judged"]
            )
        )
        + f" ({sum(r['judged'] for r in sp):,} challenges in all), so each is caught in every "
        f"challenged round: {cf['challenge_bps'] / 100:g} % of rounds, "
        f"{pct(1 - (1 - cf['challenge_bps'] / 1e4) ** 3)} within 3."
    )


def _reading_faked(o: dict) -> str:
    cf = o["config"]
    fk = o["faked_steps"]
    zmax = max(abs(r["z_1"]) for r in fk)
    zmax3 = max(abs(r["z_3"]) for r in fk)
    all_rej = all(r["faked_rejected"] == r["faked_segments"] for r in fk)
    fp = sum(r["honest_rejected"] for r in fk)
    agree = sum(r["network_agree"] for r in fk)
    judged = sum(r["network_judged"] for r in fk)
    one = [r for r in fk if r["mode"] == fk[0]["mode"]]  # the modes share the draws
    chi2 = sum(r["z_1"] ** 2 for r in one)
    per_f: dict[int, list[dict]] = {}
    for r in fk:
        per_f.setdefault(r["f_bps"], []).append(r)
    return (
        "**Faked steps**: "
        + ("every faked segment was rejected" if all_rej else "NOT every faked segment failed")
        + f" in {' and '.join(cf['modes'])} mode ({fp} of the sampled honest segments of "
        "the cheats' traces rejected); over the same drawn rounds in each mode, the "
        "measured catch rates match the formula within "
        f"|z| ≤ {zmax:.1f} per round and {zmax3:.1f} within 3 rounds (sum of z² over the "
        f"{len(one)} rows of a mode {chi2:.1f}, {len(one)} expected by chance; "
        + "; ".join(
            f"f = {f / 100:g} %: formula {pct(rs[0]['formula_1'], 3)} a round, measured "
            f"{pct(min(r['caught_1'] for r in rs), 3)}–{pct(max(r['caught_1'] for r in rs), 3)}"
            for f, rs in sorted(per_f.items())
        )
        + f"); the network path agreed with the simulation in {agree} of {judged} judged "
        "challenges."
    )


def _reading_compute(o: dict) -> str:
    cf = o["config"]
    cp = o["compute"]
    return (
        "**Verifier compute**: per challenge "
        + ", ".join(f"{pct(x['ratio'], 1)} ({x['model']} k = {x['k']})" for x in cp)
        + " of a provider round (the fixed work of a challenge dominates at s = "
        f"{cf['s']}: base decode and fresh-start build, trace root, payload re-compression, "
        "quality score); challenged in c of the rounds and audited, the expected share is "
        + ", ".join(f"**{pct(x['expected_share'], 3)}**" for x in cp)
        + " (target ≤ 5 %), "
        + ", ".join(f"{x['expected_share'] / x['model_share']:.1f}x" for x in cp)
        + " what node/client/market_msgs.py's model of it says (one step of fixed work per "
        "opened "
        "segment: at one segment a challenge's own fixed work weighs more)."
    )


def reading(o: dict) -> list[str]:
    """A reading generated from the figures (what held, what did not)."""
    out = [_reading_honest(o), _reading_start(o)]
    if o["faked_steps"]:
        out.append(_reading_faked(o))
    if o["compute"]:
        out.append(_reading_compute(o))
    return [" ".join(out)]


def render_compute(o: dict) -> str:
    """The compute rows alone (``--compute-only``), with the command, machine and load."""
    return "\n".join(
        [
            f"### Compute rows re-timed ({o['date']})",
            "",
            *header(o),
            "",
            *compute_intro(o),
            "",
            *compute_table(o),
            "",
        ]
    )


def add_compute_record(path: Path, md: str) -> None:
    """Insert ``md`` at the end of the section headed ``HEAD`` (earlier records are kept; the
    section is started at the end of the file when missing)."""
    text = path.read_text() if path.exists() else "# Results\n"
    if HEAD not in text:
        text = text.rstrip() + "\n\n" + HEAD + "\n"
    a = text.index(HEAD)
    b = text.find("\n## ", a + len(HEAD))
    b = len(text) if b == -1 else b + 1
    path.write_text(text[:b].rstrip() + "\n\n" + md.rstrip() + "\n\n" + text[b:].lstrip("\n"))


def write_section(path: Path, md: str) -> None:
    """Replace the section headed exactly ``HEAD`` (up to the next ``## ``), or append it at the
    end; no other section is touched (the older *Verification* section keeps its figures)."""
    text = path.read_text() if path.exists() else "# Results\n"
    lines = text.split("\n")
    if HEAD in lines:
        a = lines.index(HEAD)
        b = next((i for i in range(a + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
        rest = "\n".join(lines[b:])
        text = "\n".join(lines[:a]) + "\n" + md.rstrip() + "\n" + ("\n" + rest if rest else "")
    else:
        text = text.rstrip() + "\n\n" + md.rstrip() + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
