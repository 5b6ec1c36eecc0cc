"""Verification: measured catch rate of faked work vs the formula, and verifier vs provider compute.

    nice -n 10 .venv/bin/python benchmarks/verification.py --results benchmarks/RESULTS.md

What runs (tiny model, synthetic corpus, CPU, the job defaults: n = H/k = 480 segments with
k = 1, s = 15 segments per challenge, every commitment challenged, tolerance mode 1e-3):

1. **Faked steps.** For each cheat that fakes steps (skipped steps relabelled, half batches,
   bf16 instead of fp32, another shard, a replayed older state) and each f in {1, 10, 50 %}, a
   provider trace of n segments in which m = ceil(f·n) segments (seeded positions) are faked and
   the rest are honest continuations. The real verifier (``trainer.verify.verify_segment``)
   judges every faked segment and 20 sampled honest ones (all faked must fail, all honest pass).
   Then ``--rounds`` challenges are drawn exactly as the chain draws them
   (``abci_app.jobs.audit.draw_segments`` on a ``Sampler`` seeded per round; challenged when
   ``below(10000) < challenge_bps``), a round catching the provider when a drawn segment failed;
   consecutive rounds are grouped in threes. Measured rates are printed next to
   ``compute_catch_bps`` (the formula of abci_app/jobs/README.md).
2. **Start and payload cheats** (poisoned payload, payload x26, a peer's payload re-wrapped,
   made-up start moments, another base model): the real ``verify_challenge`` on the first
   ``--judged`` drawn challenges; these checks run in every challenge before any segment, so
   a round catches the cheat when it is challenged.
3. **Honest providers.** Every segment of an honest trace, exact mode (same stack) and tolerance
   mode (a provider stepping in float64, checkpointing in float32): rejections must be 0; then the
   same ``--rounds`` challenges over it.
4. **Compute.** CPU time (``time.process_time``) of one provider round (``commit_round``: H
   steps, trace, compression) vs what one verifier runs per challenge on the network
   (node/worker/worker.py ``judge``, calling the worker's own functions): ``ml.verify_round`` on
   a challenge whose opened ends are secret (``compute_hidden_entries``, the trace list masked:
   the secret-end path), then in tolerance mode ``verify_opened_end`` for every opened end, and
   the quality score of a valid vote (``ml.quality``); means over ``--reps`` challenges. The
   expected cost includes panel audits: an audited challenge's first panel has
   ``--audit-verifiers`` (1) more seats, with probability ``--audit-bps`` (4000), so expected = one
   verifier's x (1 + 0.4 x 1) with the chain's defaults. ``--compute-only`` runs this part
   alone (a few minutes) and records its rows as a dated subsection.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

from abci_app.jobs.audit import compute_catch_bps, compute_faked_segments, draw_segments
from abci_app.jobs.incentives import compute_hidden_entries, mask_trace
from abci_app.jobs.params import DEFAULTS as JOBS_PARAMS
from abci_app.jobs.sampler import Sampler
from abci_app.merkle import hash_leaf
from node.market_msgs import expected_verifier_compute_bps
from node.worker import ml
from trainer.carry import load_carry
from trainer.commit import KIND_STATE, Binding, decode, encode, update_root
from trainer.compression import make_codec
from trainer.data import Corpus, ShardSpec, synthetic_text
from trainer.determinism import DetRNG, set_determinism, stack_id
from trainer.diloco import Worker, commit_round, params_of
from trainer.model import GPTConfig, init_model
from trainer.probe import trace_probes
from trainer.state import InnerConfig, load_state, model_hash, model_payload, run_inner_steps
from trainer.verify import (
    Challenge,
    rerun_segment,
    verify_challenge,
    verify_opened_end,
    verify_segment,
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
FS = (100, 1_000, 5_000)  # fake fraction, basis points
NOTE = (
    "Reading the compute rows: a verified segment costs fixed work a provider's step does not "
    "(decode the start state, load it into the verifier's model, hash the served states: about "
    "1.5 ms on the tiny model since issue 10 cut it from 4 ms, next to a 5–7 ms "
    "step), so the measured ratio exceeds the step ratio most for the smallest model at k = 1 "
    "and approaches it as k or the model grows (a real model's step dwarfs a decode of its "
    "state). Tolerance mode also accepts a state part within 512 float32 ulps of the "
    "re-execution: the first run of this benchmark, without that floor, rejected 3 of 480 honest "
    "float64-path segments (d = 1.0–1.1e-3 on the parameters, at most 61 ulps) and so 279 of "
    "3,000 honest rounds; see trainer/README.md *Calibration*."
)


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


def network_challenge(
    segs: list[int],
    trace: list[bytes],
    states: dict[int, bytes],
    *,
    carry: bytes,
    trace_root: bytes,
    update_root: bytes,
    binding: Binding,
    payload: bytes | None,
) -> Challenge:
    """The challenge as the network's verifier holds it (node/worker/worker.py ``judge``): the
    end of each opened segment is secret (``incentives.compute_hidden_entries``: only its leaf
    hash is opened, and the served trace list holds it as that leaf hash, ``mask_trace``), so
    ``verify_challenge`` re-executes it on the secret-end path; the verifier holds entries 0,
    H/k and the opened states that are not secret."""
    n = len(trace) - 1
    hidden = compute_hidden_entries(segs, n)
    need = ({0, n} | {i for sg in segs for i in (sg, sg + 1)}) - hidden
    return Challenge(
        segments=segs,
        trace=mask_trace(list(trace), hidden),
        states={i: states[i] for i in need},
        carry=carry,
        trace_root=trace_root,
        update_root=update_root,
        binding=binding,
        payload=payload,
        hidden={i: hash_leaf(trace[i]) for i in hidden},
    )


def draws(tag: str, rounds: int, n: int, s: int, c_bps: int) -> list[list[int]]:
    """The chain's challenge draw for ``rounds`` rounds of one provider ([] = not challenged)."""
    out = []
    for r in range(rounds):
        smp = Sampler(hashlib.sha256(f"bench/{tag}/{r}".encode()).digest())
        out.append(draw_segments(smp, n, s) if smp.below(10_000) < c_bps else [])
    return out


def rates(caught: list[bool]) -> tuple[float, float]:
    """(per-round catch rate, rate of 3-round windows with at least one catch)."""
    wins = [any(caught[i : i + 3]) for i in range(0, len(caught) - 2, 3)]
    return sum(caught) / len(caught), sum(wins) / len(wins)


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0],
        epilog="example: nice -n 10 .venv/bin/python benchmarks/verification.py "
        "--results benchmarks/RESULTS.md",
    )
    ap.add_argument(
        "--n", type=int, default=480, help="segments per trace H/k (default 480, k = 1)"
    )
    ap.add_argument("--s", type=int, default=15, help="segments per challenge (default 15)")
    ap.add_argument("--challenge-bps", type=int, default=10_000)
    ap.add_argument(
        "--rounds", type=int, default=3000, help="simulated rounds per row (default 3000)"
    )
    ap.add_argument(
        "--judged",
        type=int,
        default=10,
        help="start/payload cheats: challenges judged by the real verify_challenge per cheat",
    )
    ap.add_argument(
        "--honest-sample", type=int, default=20, help="honest segments judged per cheat trace"
    )
    ap.add_argument("--reps", type=int, default=3, help="verifier challenges timed")
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
        "a dated subsection of the Verification section instead of rewriting it",
    )
    ap.add_argument("--tolerance", type=float, default=1e-3)
    ap.add_argument(
        "--audit-bps",
        type=int,
        default=JOBS_PARAMS["audit_bps"],
        help="chain param: a unanimous valid first panel is audited with this probability "
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
        "--results", help="write/replace the '## Verification' section of this RESULTS.md"
    )
    ap.add_argument("-o", "--output", choices=("text", "json"), default="text")
    a = ap.parse_args()
    t_wall = time.perf_counter()
    load_start = os.getloadavg()
    set_determinism(0, threads=1)
    corpus = Corpus(synthetic_text(200_000, seed=7))
    cfg = GPTConfig.preset("tiny")
    n, s, c, k, tol = a.n, a.s, a.challenge_bps, 1, a.tolerance
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
    bind = Binding(hashlib.sha256(b"A").digest()[:20], 1, 0, model_hash(m0))
    codec = make_codec(CODEC)
    out: dict = {
        "config": {
            "n": n,
            "s": s,
            "challenge_bps": c,
            "k": k,
            "rounds": a.rounds,
            "tolerance": tol,
            "model": "tiny",
            "codec": CODEC,
            "stack": stack_id(),
            "audit_bps": a.audit_bps,
            "audit_verifiers": a.audit_verifiers,
        },
        "load_start": load_start,
    }
    audit_factor = reexecutions_per_challenge(a.audit_bps, a.audit_verifiers)

    # 4. Compute: a provider round vs a verifier challenge, per (model, k) with n and s fixed.
    compute = []
    honest = None
    for item in a.compute.split(","):
        preset, _, kk = item.partition(":")
        ccfg, ck = GPTConfig.preset(preset), int(kk or 1)
        cspec = ShardSpec(**{**spec.to_dict(), "block_size": ccfg.block_size})
        cm0 = init_model(ccfg, 0)
        cbind = Binding(bind.provider, 1, 0, model_hash(cm0))
        t_prov: list[float] = []

        def provider_round(ccfg=ccfg, cm0=cm0, cspec=cspec, ck=ck, cbind=cbind, t_prov=t_prov):
            t0 = time.process_time()
            out = commit_round(
                Worker("A", ccfg, ICFG, "cpu"),
                params_of(cm0),
                corpus,
                cspec,
                n * ck,
                ck,
                codec,
                cbind,
            )
            t_prov.append(time.process_time() - t0)
            return out

        # the provider rounds are spread between the timed challenges (the first before them),
        # so that both sides see the same load on a shared machine
        n_prov = max(1, a.provider_reps)
        prov_at = {round(i * a.reps / n_prov) for i in range(1, n_prov)}
        art = provider_round()
        # tolerance mode: the provider also commits the probe of every trace entry (the worker's
        # trace_probes); timed apart, the ratios below leave it out of the provider's side
        t0 = time.process_time()
        probes = trace_probes(art.states)
        t_probes = time.process_time() - t0
        base_bytes = encode(model_payload(cm0))
        # the worker's own calls (node/worker/worker.py judge): ml.verify_round, then ml.quality
        plan = ml.JobPlan(
            job_id=1,
            model=ccfg,
            inner=ICFG,
            H=n * ck,
            k=ck,
            batch_size=cspec.batch_size,
            n_shards=cspec.n_shards,
            dataset_id=corpus.id,
            policy=CODEC,
            tokens_per_step=cspec.batch_size * ccfg.block_size,
            tolerance=tol,
        )
        t_ver, t_open, t_qual = [], [], []
        for rep in range(a.reps):
            if rep in prov_at:
                provider_round()  # same trace: the round is deterministic
            segs = draw_segments(Sampler(f"time/{rep}".encode()), n, s)
            ch = network_challenge(
                segs,
                art.trace,
                dict(enumerate(art.states)),
                carry=art.carry,
                trace_root=art.trace_root,
                update_root=art.update_root,
                binding=cbind,
                payload=art.payload,
            )
            t0 = time.process_time()
            v = ml.verify_round(
                plan,
                cspec,
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
            )
            t_ver.append(time.process_time() - t0)
            assert v.valid, v.reason
            assert ch.hidden and all(
                bytes.fromhex(v.segments[sg].reexecuted_hash) == art.trace[sg + 1] for sg in segs
            )
            # tolerance mode, once the provider opened its ends (MsgOpenEnd): every opened end
            # judged against the kept re-execution (the worker's judge_opened_ends)
            t0 = time.process_time()
            if tol is not None:
                for sg in segs:
                    ov = verify_opened_end(
                        art.states[sg],
                        v.segments[sg].reexecuted_state,
                        art.states[sg + 1],
                        tolerance=tol,
                        end_leaf=hash_leaf(art.trace[sg + 1]),
                        claimed_probe=probes[sg + 1],
                        tolerance_ppm=round(tol * 1e6),
                    )
                    assert ov.valid, ov.reason
            t_open.append(time.process_time() - t0)
            # a valid vote carries the update's quality (the worker's ml.quality)
            t0 = time.process_time()
            ml.quality(plan, base_bytes, art.payload, corpus)
            t_qual.append(time.process_time() - t0)
        while len(t_prov) < n_prov:  # more provider rounds than challenges
            provider_round()
        t_provider = sum(t_prov) / len(t_prov)
        tv, to, tq = (sum(x) / len(x) for x in (t_ver, t_open, t_qual))
        total = tv + to + tq
        compute.append(
            {
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
                "ratio_with_audits": audit_factor * total / t_provider,
                "steps_ratio": min(s, n) / n,
                "steps_ratio_with_audits": expected_verifier_compute_bps(
                    n, s, c, audit_bps=a.audit_bps, audit_verifiers=a.audit_verifiers
                )
                / 1e4,
            }
        )
        print(
            f"compute {preset} k={ck}: provider {t_provider:.2f} s (+ probes {t_probes:.2f} s), "
            f"verifier {total:.3f} s (challenge {tv:.3f} + opened ends {to:.3f} + quality "
            f"{tq:.3f}), ratio {100 * total / t_provider:.1f} %, expected with audits "
            f"{100 * audit_factor * total / t_provider:.1f} %",
            file=sys.stderr,
            flush=True,
        )
        if preset == "tiny" and ck == k and honest is None:
            honest = art
    out["compute"] = compute
    if a.compute_only:
        md = render_compute(out, time.perf_counter() - t_wall, a)
        if a.results:
            add_compute_record(Path(a.results), md)
        print(json.dumps(out, indent=1) if a.output == "json" else md)
        return 0
    if honest is None:
        honest = commit_round(
            Worker("A", cfg, ICFG, "cpu"), base, corpus, spec, n * k, k, codec, bind
        )

    # 3. Honest: every segment, both modes; then the drawn rounds.
    honest_rows = []
    tol_states = [honest.states[0]]
    for _ in range(n):
        tol_states.append(rerun_segment(tol_states[-1], spec, k, corpus, torch.float64))
    for mode, states, mtol in (("exact", honest.states, None), ("tolerance", tol_states, tol)):
        rej = [
            i
            for i in range(n)
            if not verify_segment(
                states[i], spec, k, states[i + 1], corpus=corpus, tolerance=mtol
            ).valid
        ]
        caught = [any(i in rej for i in d) for d in draws(f"honest/{mode}", a.rounds, n, s, c)]
        honest_rows.append(
            {
                "mode": mode,
                "segments": n,
                "rejected_segments": len(rej),
                "rounds": a.rounds,
                "rejected_rounds": sum(caught),
            }
        )
    out["honest"] = honest_rows

    # 1. Faked steps.
    rows = []
    for cheat in STEP_CHEATS:
        for f in FS:
            m = compute_faked_segments(n, f)
            pos = set(DetRNG("bench-faked", cheat, f).shuffle(list(range(n)))[:m])
            states = [honest.states[0]]
            for i in range(n):
                states.append(
                    fake(cheat, states, spec, corpus, k)
                    if i in pos
                    else honest_next(states[-1], spec, corpus, k)
                )
            bad = {
                i
                for i in pos
                if not verify_segment(
                    states[i], spec, k, states[i + 1], corpus=corpus, tolerance=tol
                ).valid
            }
            sample = DetRNG("bench-honest", cheat, f).shuffle(sorted(set(range(n)) - pos))[
                : a.honest_sample
            ]
            fp = sum(
                not verify_segment(
                    states[i], spec, k, states[i + 1], corpus=corpus, tolerance=tol
                ).valid
                for i in sample
            )
            caught = [any(i in bad for i in d) for d in draws(f"{cheat}/{f}", a.rounds, n, s, c)]
            r1, r3 = rates(caught)
            rows.append(
                {
                    "cheat": cheat,
                    "f_bps": f,
                    "faked_segments": m,
                    "faked_rejected": len(bad),
                    "honest_sampled": len(sample),
                    "honest_rejected": fp,
                    "caught_1": r1,
                    "caught_3": r3,
                    "formula_1": compute_catch_bps(n, s, c, f, 1) / 1e4,
                    "formula_3": compute_catch_bps(n, s, c, f, 3) / 1e4,
                }
            )
            print(
                f"{cheat:22s} f={f / 100:4.0f}%  faked {len(bad)}/{m} rejected, honest "
                f"{fp}/{len(sample)}; "
                f"caught 1 round {r1:.3f} (formula {rows[-1]['formula_1']:.3f}), 3 rounds {r3:.3f} "
                f"(formula {rows[-1]['formula_3']:.3f})",
                file=sys.stderr,
                flush=True,
            )
    out["faked_steps"] = rows

    # 2. Start and payload cheats: the real verify_challenge on each drawn challenge.
    peer = commit_round(
        Worker("B", cfg, ICFG, "cpu"),
        base,
        corpus,
        ShardSpec(**{**spec.to_dict(), "provider": "B", "shard": 9}),
        20,
        20,
        codec,
        Binding(hashlib.sha256(b"B").digest()[:20], 1, 0, bind.base_model_hash),
    )
    p0, pH = (decode(honest.states[i], expected_kind=KIND_STATE) for i in (0, -1))
    delta = {nm: p0.entries[nm].parts["param"] - pH.entries[nm].parts["param"] for nm in p0.entries}
    g = torch.Generator().manual_seed(0)

    def payload_of(d):
        return encode(codec.compress(d, load_carry(honest.carry)))

    other_base = commit_round(
        Worker("A", cfg, ICFG, "cpu"),
        params_of(init_model(cfg, 99)),
        corpus,
        spec,
        n * k,
        k,
        codec,
        bind,
    )
    made_up = decode(honest.states[0], expected_kind=KIND_STATE)
    for e in made_up.entries.values():
        e.parts["exp_avg"] = torch.full_like(e.parts["exp_avg"], 1e-3)
    made_up_state = encode(made_up)
    cases = {
        "honest trace + poisoned payload": dict(
            payload=payload_of(
                {nm: torch.randn(t.shape, generator=g) * 0.05 for nm, t in delta.items()}
            )
        ),
        "honest trace + payload x26": dict(
            payload=payload_of({nm: 26 * t for nm, t in delta.items()})
        ),
        "a peer's payload re-wrapped": dict(payload=peer.payload),
        "made-up start moments": dict(state0=made_up_state),
        "state from another base model": dict(art=other_base),
    }
    start_rows = []
    for name, cs in cases.items():
        art = cs.get("art", honest)
        case_states = dict(enumerate(art.states))
        trace = list(art.trace)
        if "state0" in cs:
            case_states[0] = cs["state0"]
            trace[0] = hashlib.sha256(cs["state0"]).digest()
        payload = cs.get("payload", art.payload)
        from trainer.commit import trace_root

        judged = failed = 0
        where = set()
        rounds = draws(f"start/{name}", a.rounds, n, s, c)
        for segs in [d for d in rounds if d][: a.judged]:
            ch = network_challenge(
                segs,
                trace,
                case_states,
                carry=art.carry,
                trace_root=trace_root(trace, bind),
                update_root=update_root(payload, bind),
                binding=bind,
                payload=payload,
            )
            v = verify_challenge(
                ch,
                spec,
                corpus=corpus,
                k=k,
                H=n * k,
                inner=ICFG,
                model=cfg,
                codec=CODEC,
                tolerance=tol,
            )
            judged += 1
            failed += not v.valid
            where.add(v.reason.split(":")[0])
        # checks 1-2 run before any segment and do not depend on the draw: every challenge fails
        # when the judged ones all did
        caught = [bool(d) and failed == judged for d in rounds]
        r1, r3 = rates(caught)
        start_rows.append(
            {
                "cheat": name,
                "judged": judged,
                "failed": failed,
                "check": ",".join(sorted(where)),
                "caught_1": r1,
                "caught_3": r3,
                "formula_1": c / 1e4,
                "formula_3": 1 - (1 - c / 1e4) ** 3,
            }
        )
        print(f"{name:32s} caught 1 round {r1:.3f}, 3 rounds {r3:.3f}", file=sys.stderr, flush=True)
    out["start_payload"] = start_rows
    out["seconds"] = time.perf_counter() - t_wall
    out["machine"] = (
        f"{platform.machine()}, {torch.get_num_threads()} torch thread(s), "
        f"{platform.python_version()}"
    )
    md = render(out)
    if a.results:
        write_section(Path(a.results), md)
    print(json.dumps(out, indent=1) if a.output == "json" else md)
    return 0


def render(o: dict) -> str:
    cf = o["config"]
    lines = [
        "## Verification (`benchmarks/verification.py`)",
        "",
        "Command: `nice -n 10 .venv/bin/python benchmarks/verification.py --results "
        "benchmarks/RESULTS.md` "
        f"({o['seconds']:.0f} s wall on the shared 2-core CPU, {o['machine']}; stack "
        f"`{cf['stack']}`). "
        "Times are this process's CPU time (`time.process_time`), so other load on the machine "
        "does not count.",
        f"Job defaults: n = H/k = {cf['n']} segments (k = {cf['k']}), s = {cf['s']} segments per "
        "challenge, "
        f"challenge_bps {cf['challenge_bps']}, tolerance mode {cf['tolerance']:g}; tiny model, "
        f"codec `{cf['codec']}`; "
        f"{cf['rounds']} simulated rounds per row (challenges drawn as the chain draws them), "
        "grouped in "
        f"{cf['rounds'] // 3} windows of 3 rounds. Formula: abci_app/jobs/README.md *Enough "
        "segments*.",
        "",
        "**Faked steps** (tolerance mode; exact mode rejects a superset): every faked segment "
        "judged by the real "
        "verifier, honest segments of the same trace sampled.",
        "",
        "| cheat | f | faked segments rejected | honest sampled rejected | caught, 1 round "
        "(formula) | "
        "within 3 rounds (formula) |",
        "|---|---|---|---|---|---|",
    ]
    for r in o["faked_steps"]:
        lines.append(
            f"| {r['cheat']} | {r['f_bps'] / 100:g} % | "
            f"{r['faked_rejected']}/{r['faked_segments']} | "
            f"{r['honest_rejected']}/{r['honest_sampled']} | {100 * r['caught_1']:.1f} % "
            f"({100 * r['formula_1']:.1f} %) | {100 * r['caught_3']:.1f} % "
            f"({100 * r['formula_3']:.1f} %) |"
        )
    lines += [
        "",
        "**Start and payload cheats** (checks 1–2 run in every challenge before any segment, so "
        "the "
        "drawn segments do not matter: the first challenges are judged by the real "
        "`verify_challenge`, and a "
        "round catches the cheat when it is challenged):",
        "",
        "| cheat | judged challenges failed | failing check | caught, 1 round (formula = "
        "challenge rate) | "
        "within 3 rounds |",
        "|---|---|---|---|---|",
    ]
    for r in o["start_payload"]:
        lines.append(
            f"| {r['cheat']} | {r['failed']}/{r['judged']} | {r['check']} | "
            f"{100 * r['caught_1']:.1f} % "
            f"({100 * r['formula_1']:.0f} %) | {100 * r['caught_3']:.1f} % |"
        )
    lines += [
        "",
        "**Honest providers:**",
        "",
        "| mode | segments judged | rejected | rounds | rounds rejected |",
        "|---|---|---|---|---|",
    ]
    for r in o["honest"]:
        lines.append(
            f"| {r['mode']} | {r['segments']} | {r['rejected_segments']} | {r['rounds']} | "
            f"{r['rejected_rounds']} |"
        )
    lines += [
        "",
        f"**Compute** (n = {cf['n']} segments, s = {cf['s']}; provider round = H steps, a state "
        "hash every k steps, compression; verifier = start + payload checks + s re-executed "
        "segments with secret ends, the opened ends judged, the quality scored; mean of the "
        "timed challenges). " + PATH_NOTE,
        "",
    ]
    lines += compute_table(o)
    lines += ["", NOTE, ""]
    return "\n".join(lines)


def reexecutions_per_challenge(audit_bps: int, audit_verifiers: int) -> float:
    """Expected re-executions of an honest challenge: the first panel's one verifier (the CLI
    default) and, when the challenge is audited (``audit_bps``), ``audit_verifiers`` more; the
    same factor ``node.market_msgs.expected_verifier_compute_bps`` applies to the steps."""
    return (10_000 + audit_bps * audit_verifiers) / 10_000


def compute_table(o: dict) -> list[str]:
    cf = o["config"]
    fac = reexecutions_per_challenge(cf["audit_bps"], cf["audit_verifiers"])
    lines = [
        "| model (params) | k | H | provider round | verifier: challenge + opened ends + quality "
        f"| verifier / provider | expected with panel audits (x {fac:g}) | re-executed steps / "
        "provider steps (with audits) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for cp in o["compute"]:
        lines.append(
            f"| {cp['model']} ({cp['params']:,}) | {cp['k']} | {cp['H']} | "
            f"{cp['provider_round_s']:.2f} s | {cp['verifier_total_s']:.3f} s = "
            f"{cp['verifier_challenge_s']:.3f} + {cp['verifier_opened_ends_s']:.3f} + "
            f"{cp['verifier_quality_s']:.3f} s | {100 * cp['ratio']:.1f} % | "
            f"**{100 * cp['ratio_with_audits']:.1f} %** | {100 * cp['steps_ratio']:.1f} % "
            f"({100 * cp['steps_ratio_with_audits']:.1f} %) |"
        )
    return lines


PATH_NOTE = (
    "What is timed is what the network runs (node/worker/worker.py `judge` and "
    "`judge_opened_ends`): the end of every opened segment is secret "
    "(`incentives.compute_hidden_entries`, the served trace list masked), so the worker's "
    "`ml.verify_round` re-executes it on the secret-end path; in tolerance mode each opened end "
    "is then judged against the kept re-execution (`verify_opened_end`: the probe of the opened "
    "state and every "
    "state part within tolerance); a valid vote carries the update's quality "
    "(`ml.quality`: `quality_score` on one held-out batch of 32 windows since 2026-12-02, four "
    "before). One first-panel verifier "
    "(the CLI default); a challenge is audited with probability audit_bps: its first panel has "
    "audit_verifiers more seats, each paying the same, hence the expected column. The provider "
    "side is `commit_round` alone: its tolerance-mode probes of every trace entry (`trace_probes`) "
    "are left out (their time is listed under the table), so the ratios are higher than the "
    "network's by that share."
)


def render_compute(o: dict, seconds: float, a: argparse.Namespace) -> str:
    """The compute rows alone (``--compute-only``), with the command, machine and load."""
    cf = o["config"]
    load = " / ".join(f"{x:.1f}" for x in os.getloadavg())
    load0 = " / ".join(f"{x:.1f}" for x in o.get("load_start", ()))
    cmd = (
        "nice -n 10 .venv/bin/python benchmarks/verification.py --compute-only "
        + ("" if a.n == 480 else f"--n {a.n} ")
        + f"--compute {a.compute} --reps {a.reps} --provider-reps {a.provider_reps} "
        + (
            ""
            if (a.audit_bps, a.audit_verifiers)
            == (JOBS_PARAMS["audit_bps"], JOBS_PARAMS["audit_verifiers"])
            else f"--audit-bps {a.audit_bps} --audit-verifiers {a.audit_verifiers} "
        )
        + "--results benchmarks/RESULTS.md"
    )
    return "\n".join(
        [
            f"### Compute rows re-timed ({time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())})",
            "",
            f"Command: `{cmd}` ({seconds:.0f} s wall; {platform.machine()}, "
            f"{torch.get_num_threads()} torch thread(s), {platform.python_version()}; stack "
            f"`{cf['stack']}`). The machine was shared (load average {load0} at the start, "
            f"{load} at the end, over 1/5/15 min; 2 cores): CPU time (`time.process_time`) "
            "leaves other processes out, but not their cache and memory-bandwidth contention, so "
            "on a loaded machine these ratios move by a percent or more between runs: compare "
            "records. n = "
            f"{cf['n']}, s = {cf['s']}, codec `{cf['codec']}`, tolerance mode {cf['tolerance']:g}, "
            f"audit_bps {cf['audit_bps']}, audit_verifiers {cf['audit_verifiers']}; "
            f"provider = mean of {max(1, a.provider_reps)} rounds, verifier = mean of {a.reps} "
            "challenges (the provider rounds timed between the challenges). " + PATH_NOTE,
            "",
            *compute_table(o),
            "",
            "Provider probes (`trace_probes`, not in the ratios): "
            + ", ".join(
                f"{cp['model']} k = {cp['k']}: {cp['provider_probes_s']:.2f} s"
                for cp in o["compute"]
            )
            + ".",
            "",
        ]
    )


def add_compute_record(path: Path, md: str) -> None:
    """Insert ``md`` at the end of the Verification section (earlier records are kept)."""
    text = path.read_text()
    head = "## Verification (`benchmarks/verification.py`)"
    a = text.index(head)
    b = text.find("\n## ", a + len(head))
    b = len(text) if b == -1 else b + 1
    path.write_text(text[:b].rstrip() + "\n\n" + md.rstrip() + "\n\n" + text[b:].lstrip("\n"))


def write_section(path: Path, md: str) -> None:
    text = path.read_text() if path.exists() else "# Results\n"
    head = "## Verification (`benchmarks/verification.py`)"
    if head in text:
        a = text.index(head)
        b = text.find("\n## ", a + len(head))
        text = text[:a] + md.rstrip() + "\n" + (text[b:] if b != -1 else "")
    else:
        text = text.rstrip() + "\n\n" + md.rstrip() + "\n"
    path.write_text(text)


if __name__ == "__main__":
    sys.exit(main())
