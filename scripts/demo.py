"""`make demo`: the whole story on one machine, with the commands a user would type.

1. `loconet testnet up --validators 4 --providers 4 --cheaters random-root:1`: four validators,
   four provider workers (three honest, one that commits to random bytes without training), and
   a training job on the built-in text corpus
2. every round as it finalizes, read from the chain: participants and their shards, commitments,
   challenges, verifiers' votes, outcomes, payouts and slashes, the attested model and the stake
   that attested it; and the held-out loss of each attested model (fetched by hash from a
   worker's blob server and evaluated here)
3. the cheater proven fraudulent, slashed and jailed; the honest providers paid; a loss plot
4. `loconet testnet down`: everything stopped cleanly

`scripts/demo.py --busy N` runs the same story with N CPU-burning processes (busy loops at the
user's own priority, never niced) beside the network for its whole length: a provider's machine
is a busy machine, and the story must hold there too (`make demo` runs it idle).

It exits non-zero, naming what is missing, when the chain does not show that story: the cheater
not proven fraudulent, slashed and jailed; an honest provider slashed, a commitment of its not
accepted and paid, or paid nothing at all; a model attested by under 2/3 of the accepted stake
(computed from each round's participants); no round finalized.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from node.client.market_render import reputation_reason, reward_reason
from node.client.rpc import Client
from node.local.manifest import load, workers_of
from node.local.testnet_market import trainer_utilization
from node.ports import find_free_base

ROOT = Path(__file__).resolve().parent.parent
DIR = ROOT / ".loconet-demo"
LOCONET = [sys.executable, "-m", "node.cli"]
ROUNDS = 6
ROUND_STALL_S = 300  # the longest the demo waits for the next round to finalize


def step(text: str) -> None:
    print(f"\n\033[1m== {text}\033[0m", flush=True)


def run(*args: str, show: bool = True, check: bool = True) -> str:
    if show:
        print("$ loconet " + " ".join(shlex.quote(a) for a in args), flush=True)
    r = subprocess.run([*LOCONET, *args], check=False, capture_output=True, text=True, cwd=ROOT)
    if check and r.returncode != 0:
        sys.exit(f"demo failed: loconet {' '.join(args)}\n{r.stdout}{r.stderr}")
    if show:
        print(r.stdout.rstrip(), flush=True)
    return r.stdout


def free_base() -> int:
    offsets = [100 * i + k for i in range(4) for k in (0, 1, 4, 24)]
    return find_free_base(range(26656, 40000, 1000), offsets)


def query(node: str, path: str) -> Any:
    with Client(node, timeout=5) as c:
        qr = c.abci_query(path)
    if qr.code != 0:
        raise RuntimeError(qr.log)
    return json.loads(qr.value)


_BURNERS: list[subprocess.Popen[bytes]] = []


def start_burners(n: int) -> None:
    """N processes that each keep one core busy (a tight loop, the user's priority), until
    stop_burners or this process dies (each exits when its parent is gone)."""
    loop = (
        "import os\n"
        "p = os.getppid()\n"
        "while os.getppid() == p:\n"
        "    for _ in range(1_000_000): pass\n"
    )
    for _ in range(n):
        _BURNERS.append(subprocess.Popen([sys.executable, "-c", loop]))
    if n:
        print(f"(busy mode: {n} CPU-burning processes beside the network, {os.cpu_count()} cores)")


def stop_burners() -> None:
    for p in _BURNERS:
        p.kill()
    for p in _BURNERS:
        p.wait()
    _BURNERS.clear()


class Demo:
    """The running demo: the network's first node, the job and its plan, the workers (named,
    ``*`` for the cheater), the blob fetcher, the held-out corpus and the losses so far."""

    def __init__(self, base: int) -> None:
        # torch, aiohttp and (in plot) matplotlib are imported where the story needs them:
        # benchmarks/round_overhead.py imports this script for its burners alone
        from node.blobs import BlobClient, BlobStore  # lazy: aiohttp (see above)
        from node.worker import ml  # lazy: torch (see above)
        from trainer.data import Corpus  # lazy: torch (see above)

        m = load(DIR)
        self.node = f"http://127.0.0.1:{base + 1}"
        self.job_id = m["job_id"]
        self.workers = workers_of(m)
        self.name = {
            w.address: w.name + ("*" if w.behaviour != "honest" else "") for w in self.workers
        }
        print("(* = the random-root cheater)")
        self.job = query(self.node, f"/job/{self.job_id}")
        self.plan = ml.JobPlan.from_job(self.job)
        self.store = BlobStore(DIR / "demo-blobs", quota_bytes=1 << 30)
        self.fetcher = BlobClient(timeout_s=20, max_bytes=1 << 30)
        self.urls = [w.endpoint for w in self.workers]
        self.corpus = Corpus(self.blob(self.plan.dataset_id))
        initial = self.blob(self.job["spec"]["initial_model_hash"])
        self.losses = [("initial", ml.val_loss(self.plan, initial, self.corpus))]
        self.problems: list[str] = []  # what the story claims and the chain does not show

    def blob(self, h: str) -> bytes:
        return Path(self.fetcher.fetch(h, self.urls, self.store)).read_bytes()


def start_network(busy: int) -> int:
    """Step 1: the old demo folder gone, the --busy burners, then the testnet with its job;
    returns its base port."""
    if DIR.exists():
        subprocess.run(
            [*LOCONET, "testnet", "down", "--dir", str(DIR)],
            check=False,
            capture_output=True,
            cwd=ROOT,
        )
        shutil.rmtree(DIR)
    start_burners(busy)
    step("1. a 4-validator network, 4 provider workers (one cheats), and a training job")
    base = free_base()
    run(
        "testnet",
        "up",
        "--dir",
        str(DIR),
        "--validators",
        "4",
        "--providers",
        "4",
        "--cheaters",
        "random-root:1",
        "--rounds",
        str(ROUNDS),
        "--base-port",
        str(base),
    )
    return base


def intro(d: Demo) -> None:
    """The job, the initial model's loss, and how to read along."""
    plan, job = d.plan, d.job
    print(
        f"job {d.job_id}: {ROUNDS} rounds, H={plan.H} steps of "
        f"{plan.batch_size}x{plan.model.block_size} bytes, a state every k={plan.k}, policy "
        f"{plan.policy}, {job['spec']['participants_per_round']} providers train and "
        f"{job['spec']['verifiers_per_challenge']} verify each round, challenge rate 100 %"
    )
    print(
        f"initial model {job['spec']['initial_model_hash'][:12]}: held-out loss "
        f"{d.losses[0][1]:.3f}"
    )
    print(
        f"$ loconet query rounds {d.job_id} --node {d.node}   (what the rest of this demo reads, "
        "round by round)"
    )
    print(LEGEND.format(H=plan.H, k=plan.k, n=plan.H // max(1, plan.k)))


def show_attestation(d: Demo, r: dict) -> None:
    """A finalized round's attested model (its loss, the bond that signed it), or why none."""
    from node.worker import ml  # lazy: torch (Demo.__init__)

    if not r["attested_model_hash"]:
        print(
            "  no model attested: providers holding 2/3 of the accepted bond did not sign one "
            "hash in time; the job's base model stays"
        )
        return
    loss = ml.val_loss(d.plan, d.blob(r["attested_model_hash"]), d.corpus)
    d.losses.append((f"round {r['round']}", loss))
    # the quorum is over the accepted participants' stake (abci_app/jobs/rounds.py
    # compute_attested); /round gives each participant's stake and outcome
    total = sum(p["stake"] for p in r["participants"] if p["outcome"] == "accepted")
    share = r["attest_stake"] / total if total else 0.0
    print(
        f"  attested model {r['attested_model_hash'][:12]} by "
        f"{r['attest_stake'] // 1_000_000} LOCO of bond ({100 * share:.0f} % of the "
        f"accepted participants' {total // 1_000_000} LOCO; 2/3 needed): held-out loss "
        f"{loss:.3f} ({compare(loss, d.losses)})"
    )
    if 3 * r["attest_stake"] < 2 * total or not total:
        d.problems.append(
            f"round {r['round']}: model attested by {100 * share:.0f} % of the accepted "
            "stake, under 2/3"
        )


def show_rounds(d: Demo) -> None:
    """Step 2: each round as the chain finalizes it."""
    step("2. the rounds, as the chain finalizes them")
    shown = 0
    # a stall, not a slow machine, ends the wait: ROUND_STALL_S without a round finalizing
    deadline = time.monotonic() + ROUND_STALL_S
    while shown < ROUNDS and time.monotonic() < deadline:
        rounds = query(d.node, f"/rounds/{d.job_id}?from={shown}&limit=4")["rounds"]
        done = [r for r in rounds if r["phase"] == "finalized"]
        if not done or done[0]["round"] != shown:
            time.sleep(1.0)
            continue
        deadline = time.monotonic() + ROUND_STALL_S
        r = done[0]
        show_round(r, d.name)
        show_attestation(d, r)
        shown += 1
    if shown < ROUNDS:
        print(
            f"(stopped waiting after round {shown - 1}; the network keeps going until `testnet "
            "down`)"
        )


def show_providers(d: Demo) -> None:
    """Step 3: each provider's pay, slashes and busy share, checked against its behaviour."""
    step("3. who was paid, who was slashed, how busy each trainer was")
    final = [r for r in query(d.node, f"/rounds/{d.job_id}")["rounds"] if r["phase"] == "finalized"]
    for w in d.workers:
        p = query(d.node, f"/provider/{w.address}")
        paid = sum(
            q["reward"] for r in final for q in r["participants"] if q["address"] == w.address
        )
        print(
            f"  {d.name[w.address]:11s} {w.behaviour:12s} status {p['status']:8s} reputation "
            f"{p['reputation']:>5d}  earned {paid / 1e6:8.2f} LOCO  slashed "
            f"{p['slashed_total'] / 1e6:8.2f} LOCO  {trainer_busy(w)}"
        )
        d.problems += check_provider(w.name, w.address, w.behaviour, p, final)
    print(
        "  (busy: the share of the time from a provider's first training to its last that its "
        "trainer computed;\n"
        "   the rest it waited for the chain or for the round before; rounds it was not drawn in "
        "count as waiting.\n"
        "   This job trains ~1 s a round and re-executes every commitment, so verification fills "
        "its rounds;\n"
        "   at 30 s of compute and the default 5 % challenge rate trainers compute 94-96 % of the "
        "time:\n"
        "   benchmarks/round_overhead.py, benchmarks/RESULTS.md)"
    )
    if not final:
        d.problems.append("no round finalized")


def show_losses(d: Demo) -> None:
    """The attested models' held-out losses, round by round, and their plot."""
    losses = d.losses
    print("\nheld-out loss of the attested models, round by round (lower is better):")
    print("  " + "  ".join(f"{i}: {v:.3f}" for i, v in losses))
    if len(losses) > 1:
        first, last = losses[0][1], losses[-1][1]
        print(
            f"  the model {'improved' if last < first else 'did NOT improve'}: held-out loss "
            f"{first:.3f} -> {last:.3f} ({abs(100 * (first - last) / first):.0f} % "
            f"{'lower' if last < first else 'higher'}) on text no provider trained on"
        )
    print(
        "  (round r+1 opens once round r's commitments are all in and round r-1 is final: it "
        "trains on\n"
        "   round r-1's model while round r is verified, so neighbouring rounds can share a base)"
    )
    plot(losses, DIR / "val_loss.png")
    print(f"plot: {DIR / 'val_loss.png'}")


def main(busy: int = 0) -> int:
    t0 = time.monotonic()
    d = Demo(start_network(busy))
    intro(d)
    show_rounds(d)
    show_providers(d)
    show_losses(d)
    d.fetcher.close()

    step("4. stop everything cleanly")
    run("testnet", "down", "--dir", str(DIR))
    if d.problems:
        sys.exit("demo failed: the chain does not show the story:\n  " + "\n  ".join(d.problems))
    print(
        f"\ndemo done in {time.monotonic() - t0:.0f}s. Explore further: `source .venv/bin/activate`"
        f" (puts loconet on your PATH), then `loconet --help`; "
        f"`loconet testnet up --providers 4 --dir {DIR}` restarts it"
    )
    return 0


def trainer_busy(w: Any) -> str:
    """``busy NN % (K rounds trained)`` from the worker's stats.json (node/local/testnet_market.py
    ``trainer_utilization``), or why there is no figure."""
    try:
        stats = json.loads((w.path / "stats.json").read_text())
        u = trainer_utilization(stats.get("rounds", {}))
    except (OSError, ValueError, AttributeError):
        return "busy -"
    if u is None:
        return "busy - (trained < 2 rounds)"
    return f"busy {100 * u['utilization']:3.0f} % ({int(u['rounds'])} rounds trained)"


def check_provider(
    who: str, address: str, behaviour: str, p: dict[str, Any], rounds: list[dict[str, Any]]
) -> list[str]:
    """What the demo claims of one provider, from the chain (its record ``p``, the finalized
    ``rounds``): the cheater proven fraudulent in a round it was drawn in, slashed and jailed;
    an honest one never slashed, each of its commitments accepted and paid, and paid something
    (as a participant or a verifier). The problems, as lines; none when it holds."""
    mine = [q for r in rounds for q in r["participants"] if q["address"] == address]
    payouts = sum(x["amount"] for r in rounds for x in r["payouts"] if x["address"] == address)
    out: list[str] = []
    if behaviour != "honest":
        if not mine:
            out.append(f"{who} ({behaviour}) was never drawn: its fraud was not shown")
        elif not any(q["outcome"] == "fraud" and q["slashed"] > 0 for q in mine):
            outcomes = ", ".join(f"{q['outcome']} (slashed {q['slashed']})" for q in mine)
            out.append(f"{who} ({behaviour}) was not found fraudulent and slashed: {outcomes}")
        if p["slashed_total"] <= 0 or p["status"] == "active":
            out.append(
                f"{who} ({behaviour}): slashed {p['slashed_total']}, status {p['status']}: not "
                "slashed and jailed"
            )
        return out
    if p["slashed_total"] > 0:
        out.append(f"honest {who} was slashed {p['slashed_total'] / 1e6:.6g} LOCO")
    for r in rounds:
        for q in r["participants"]:
            if q["address"] == address and (q["outcome"] != "accepted" or q["reward"] <= 0):
                out.append(
                    f"honest {who} in round {r['round']}: {q['outcome']}, reward {q['reward']}"
                )
    if payouts <= 0:
        out.append(f"honest {who} was paid nothing in {len(rounds)} round(s)")
    return out


LEGEND = """
How to read what follows (a legend):
  round      the chain draws providers to train the current model for H={H} inner steps, each on its
             own shard of the data, then sync once: each commits to its compressed update (a Merkle
             root of it and of its training trace, a state every k={k} steps) before the commit
             deadline; heights are block numbers (a block every ~0.5 s)
  challenge  the chain picks segments of each trace ("segments 1,2 revealed": the provider opened
             those stretches of k steps, of its {n}); verifiers re-run them from the opened start
             state and vote valid or INVALID
  verdict    2/3 of the verifiers' stake decides: accepted, fraud (the bond is slashed and the
             provider jailed), or undecided (no 2/3 either way: neither paid nor slashed)
  attested   the accepted providers average the accepted updates into the next model and sign its
             hash; it becomes the next base once providers holding 2/3 of the accepted bond agree
  one-step   round r+1 opens once round r's commitments are all in and round r-1 is final: it trains
  delay      on round r-1's model while round r is verified, so neighbouring rounds can share a base
  reward     the round's reward split over the accepted participants that attested the quorum's
             model, by tokens x reputation; a 0 has its reason printed under it
  held-out   each attested model, fetched by its hash, evaluated on text no provider trained on
  loss       (lower is better); "loss a->b" on a provider's line is what it reported for its shard
"""


def compare(loss: float, losses: list[tuple[str, float]]) -> str:
    """The held-out loss (the last of ``losses``) against the initial model's and the previous
    attested one's."""
    first, earlier = losses[0][1], [v for _, v in losses[1:-1]]
    out = f"initial {first:.3f}: {'better' if loss < first else 'NOT better'}"
    if earlier:
        out += f"; previous {earlier[-1]:.3f}: {'better' if loss < earlier[-1] else 'not better'}"
    return out


def outcome_reason(r: dict[str, Any], p: dict[str, Any]) -> str:
    """Why a line reads as it does, in words: an outcome other than accepted, an accepted update
    paid nothing, a reputation drop (node/client/market_render.py, as `loconet query round`
    says)."""
    o = p["outcome"]
    if o == "fraud":
        return (
            "fraud: the verifiers' re-execution did not reach its committed states; half its "
            "bond slashed, jailed"
        )
    if o == "undecided":
        return "undecided: the votes reached no 2/3 majority either way; not paid, not slashed"
    if o in ("missed_commit", "missed_reveal"):
        return f"{o}: {reward_reason(r, p)}; reputation {reputation_reason(r, p)}"
    if o == "accepted" and not p["reward"]:
        return f"reward 0: {reward_reason(r, p)}"
    if o == "accepted" and p["reputation_delta"] < 0:
        return f"reputation {p['reputation_delta']:+d}: {reputation_reason(r, p)}"
    return ""


def show_round(r: dict[str, Any], name: dict[str, str]) -> None:
    w = r["windows"]
    print(
        f"round {r['round']}: opened at {w['open_height']}, commit <= {w['commit_deadline']}, "
        f"finalized at {r['finalized_height']}; base model {r['base_model_hash'][:12]}"
    )
    for p in r["participants"]:
        c, ch = p["commitment"], p["challenge"]
        votes = ""
        if ch:
            vs = ch["verifiers"]
            votes = (
                " ".join(
                    f"{name.get(v['address'], v['address'][:10])}:"
                    + (
                        "unavailable"
                        if v.get("unavailable")
                        else "valid"
                        if v["valid"]
                        else "INVALID"
                    )
                    for v in vs
                    if v["voted"]
                )
                or "no votes"
            )
        loss = (
            f"loss {c['loss_before_mnats'] / 1000:.2f}->{c['loss_after_mnats'] / 1000:.2f}"
            if c
            else "no commitment"
        )
        segs = ",".join(str(x) for x in (ch.get("segments") or [ch["segment"]])) if ch else ""
        seg = (
            f"segments {segs} {'revealed' if ch['reveal'] else 'NOT revealed'}"
            if ch
            else "unchallenged"
        )
        print(
            f"  {name.get(p['address'], p['address'][:12]):11s} shard {p['shard']:>2d}  "
            f"{loss:20s} {seg:24s} votes [{votes}] -> {p['outcome']:9s} reward "
            f"{p['reward'] / 1e6:6.2f} LOCO"
            + (f"  SLASHED {p['slashed'] / 1e6:.2f} LOCO" if p["slashed"] else "")
        )
        why = outcome_reason(r, p)
        if why:
            print(f"      ({why})")


def plot(losses: list[tuple[str, float]], path: Path) -> None:
    import matplotlib  # lazy: as torch in Demo.__init__

    matplotlib.use("Agg")  # written to a file: no display needed
    import matplotlib.pyplot as plt  # lazy: after choosing the backend

    fig, ax = plt.subplots(figsize=(6, 3.5))
    ax.plot(range(len(losses)), [y for _, y in losses], marker="o")
    ax.set_xticks(range(len(losses)), [x.replace("round ", "r") for x, _ in losses])
    ax.set_xlabel("attested model (initial, then after each round)")
    ax.set_ylabel("held-out loss (nats/byte)")
    ax.set_title("loconet testnet: 3 honest providers + 1 cheater")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def _stop_network() -> None:
    """Stop whatever the demo started (it runs beside this process: nodes and workers)."""
    if DIR.exists():
        subprocess.run(
            [*LOCONET, "testnet", "down", "--dir", str(DIR)],
            check=False,
            capture_output=True,
            cwd=ROOT,
        )


def _terminated(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="scripts/demo.py",
        description="the `make demo` story: 4 validators, 4 provider workers (one cheats)",
        epilog="example: .venv/bin/python scripts/demo.py --busy 4   (the story on a busy machine)",
    )
    p.add_argument(
        "--busy",
        type=int,
        default=0,
        metavar="N",
        help="run N CPU-burning processes beside the network for the whole demo (default 0)",
    )
    a = p.parse_args(argv)
    if not 0 <= a.busy <= 256:
        p.error(f"--busy {a.busy}: give 0..256 processes")
    return a


if __name__ == "__main__":
    # Ctrl-C, SIGTERM (`timeout`, a CI runner) or a failure midway (an exception, or a failed
    # step's sys.exit) stop the network too: the validators and workers are separate processes
    # that would otherwise keep running
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGTERM, _terminated)
    args = parse_args()
    try:
        code = main(args.busy)
    except KeyboardInterrupt:
        print("\ninterrupted: stopping the network", file=sys.stderr)
        _stop_network()
        sys.exit(130)
    except BaseException:
        _stop_network()
        raise
    finally:
        stop_burners()
    sys.exit(code)
