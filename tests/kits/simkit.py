"""Invariant simulation (Cosmos-simulation style) over the test kits.

A seeded random walk of blocks through every module: bank transfers, validators created,
bonded, unbonded and unjailed, validators absent from the last commit (downtime) and accused by
duplicate-vote evidence (double sign), providers registering, topping up and exiting, jobs
created and cancelled, and every live round's participants, verifiers and attesters doing their
duty, skipping it or doing it wrong, so rounds advance through commit, reveal, verdict, attest
and finalize with every outcome. About one random tx in seven is malformed on purpose (bad
signature, wrong chain, sequence gap or replay, timed out, garbage bytes, unpayable fee, a fee
one uloco below the minimum); the others pay the chain's minimum fee plus 0, 1 or 100 uloco.

The blocks are driven by stakekit's ``StakeChain`` (CometBFT-like decided last commits and
evidence, the validator set CometBFT really has at each height), the messages are built with
stakekit's and marketkit's builders, and ``Lockstep`` feeds two Applications (the second on
its own store, optionally a SQLite file reopened every N blocks) the same ABCI calls.

Checked after every block; the first failure raises ``SimulationFailure`` naming the seed and
height (``benchmarks/simulate.py --seed S --blocks H`` replays it):

- every module invariant on both apps (``Application.invariants``: supply, bonded and
  unbonding pools, provider bonds and reputation range, job escrow books and schedule, liveness
  bitmaps);
- both apps return byte-identical responses to FinalizeBlock (app hash, tx results, events,
  validator updates), CheckTx and Info (after a restart);
- the supply moves only by minted block rewards and burned slashes, as the block's events say;
- the validator powers in the store are the set CometBFT will have from the updates it was sent;
- a rejected tx changes nothing: the same block without its failed txs has the same writes,
  events and results.
"""

from __future__ import annotations

import hashlib
import random
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from abci_app.app import Application, block_context, execute_block
from abci_app.auth.params import fee_fixpoint
from abci_app.auth.params import get_params as get_auth_params
from abci_app.bank import keeper as bank
from abci_app.bank.keys import MODULE_ACCOUNTS
from abci_app.codec.tx import Ed25519Signer, SignatureCache, build_tx
from abci_app.encoding import prefix_end
from abci_app.jobs import keeper as jobs_keeper
from abci_app.jobs.keys import ROUND_DUE_PREFIX, parse_round_due_key
from abci_app.pb import abci, jobs_pb2, settlement_pb2, tx_pb2
from abci_app.providers import keeper as providers_keeper
from abci_app.staking import keeper as staking_keeper
from abci_app.store import MerkleStore
from tests.kits.chainkit import CHAIN_ID, send_msg, signer
from tests.kits.marketkit import (
    agg_hash,
    attest_msg,
    cancel_msg,
    create_job_msg,
    exit_msg,
    h,
    open_end_msg,
    register_msg,
    reveal_msg,
    submit_msg,
    update_msg,
    verdict_msg,
    vote_msgs,
)
from tests.kits.stakekit import (
    LOCO,
    StakeChain,
    bond_msg,
    create_validator_msg,
    new_staking_chain,
    unbond_msg,
    unjail_msg,
)

# Short periods so that a few hundred blocks see jails, unjails, matured unbondings, exits and
# many whole rounds; the cross-module genesis rules still hold (evidence age <= unbonding,
# provider unbonding > 9 x max window).
GENESIS_STAKING = {
    "unbonding_blocks": 30,
    "block_reward": LOCO,
    "max_unbonding_entries": 4,
    "min_self_bond": LOCO,
}
GENESIS_SLASHING = {
    "signed_blocks_window": 20,
    "min_signed_per_window_bps": 5_000,
    "downtime_jail_blocks": 10,
    "max_evidence_age_blocks": 30,
}
GENESIS_MARKET = {
    "providers": {"params": {"unbonding_blocks": 46, "min_provider_stake": 1_000 * LOCO}},
    "jobs": {"params": {"max_window_blocks": 5, "min_fraud_verifiers": 2, "max_rounds": 4}},
}
SEGMENTS = [(8, 2), (4, 4), (6, 3), (8, 1)]  # (inner_steps, trace_interval)
MALFORMED = ("badsig", "chain", "gap", "replay", "timeout", "garbage", "fee", "underfee")


class SimulationFailure(AssertionError):
    pass


# ---------------------------------------------------------------------------------------------
# two apps in lockstep


def _bytes(m: Any) -> bytes:
    return m.SerializeToString(deterministic=True)


class Lockstep:
    """Two Applications fed the same ABCI calls; any difference in a response is a divergence.
    Reads (``store``, ``query``) go to the first."""

    def __init__(self, a: Application, b: Application) -> None:
        self.a, self.b = a, b
        self.compared = 0
        self.check_second = True  # the same state as the first's once the app hashes agree

    @property
    def store(self) -> MerkleStore:
        return self.a.store

    @property
    def chain_id(self) -> str:
        return self.a.chain_id

    def _same(self, what: str, ra: Any, rb: Any) -> Any:
        self.compared += 1
        if _bytes(ra) != _bytes(rb):
            raise SimulationFailure(
                f"divergence in {what} at height {self.a.store.height + 1}:\n{ra}\n---\n{rb}"
            )
        return ra

    def info(self, req: abci.RequestInfo) -> abci.ResponseInfo:
        return self._same("Info", self.a.info(req), self.b.info(req))

    def init_chain(self, req: abci.RequestInitChain) -> abci.ResponseInitChain:
        return self._same("InitChain", self.a.init_chain(req), self.b.init_chain(req))

    def check_tx(self, req: abci.RequestCheckTx) -> abci.ResponseCheckTx:
        return self._same("CheckTx", self.a.check_tx(req), self.b.check_tx(req))

    def finalize_block(self, req: abci.RequestFinalizeBlock) -> abci.ResponseFinalizeBlock:
        return self._same("FinalizeBlock", self.a.finalize_block(req), self.b.finalize_block(req))

    def commit(self, req: abci.RequestCommit) -> abci.ResponseCommit:
        return self._same("Commit", self.a.commit(req), self.b.commit(req))

    def query(self, req: abci.RequestQuery) -> abci.ResponseQuery:
        return self._same("Query", self.a.query(req), self.b.query(req))

    def invariants(self) -> None:
        self.a.invariants()
        if self.check_second:
            self.b.invariants()


# ---------------------------------------------------------------------------------------------
# the simulation


@dataclass(kw_only=True)
class SimConfig:
    seed: int = 0
    blocks: int = 150
    validators: int = 4
    accounts: int = (
        16  # enough providers that verifiers (never participants nor the owner) can be drawn
    )
    ops_per_block: int = 6  # random txs per block: 0..this, plus the market duties
    disk: Path | None = None  # the second app's SQLite file (else in memory)
    restart_every: int = 0  # reopen the second app from its file every N blocks
    check_rejected: bool = True  # rerun each block without its failed txs: same writes
    # also check the invariants inside FinalizeBlock on the staged view (as a node with
    # check_invariants does); the committed state is checked after every block either way
    staged_invariants: bool = True
    # the second app's invariants every N blocks (1: every block). Its app hash equals the
    # first's after every block, and the app hash commits to the whole state, so this only
    # re-reads the same state through the other store (long runs save half their time)
    second_invariants_every: int = 1


@dataclass
class SimStats:
    blocks: int = 0
    txs: int = 0
    ok: int = 0
    codes: Counter[str] = field(default_factory=Counter)  # "op code" -> count
    events: Counter[str] = field(default_factory=Counter)  # "type[:reason]" -> count
    phases: Counter[int] = field(default_factory=Counter)  # round phase -> rounds seen in it
    restarts: int = 0
    rejected_checks: int = 0
    compared: int = 0
    seconds: float = 0.0

    def ops(self) -> dict[str, tuple[int, int]]:
        """op -> (accepted, rejected)."""
        out: dict[str, list[int]] = {}
        for key, n in self.codes.items():
            op, code = key.split(" ")
            out.setdefault(op, [0, 0])[0 if code == "0" else 1] += n
        return {k: (v[0], v[1]) for k, v in sorted(out.items())}


_EVENT_DETAIL = {
    "validator.jailed": "reason",
    "validator.slashed": "reason",
    "provider.slashed": "reason",
    "job.closed": "status",
    "verdict.decided": "outcome",
    "reputation.changed": "reason",
    "reward.paid": "payout",
    "round.closed_early": "phase",
}


Duty = tuple[str, Ed25519Signer, tx_pb2.Msg]  # (label, signer, message) of one tx to send


class _SimState:
    """What every part of the simulation reads: the two apps in lockstep, the chain driving
    them, the accounts and their keys, the test's randomness; and the helpers over them. The
    parts below (random operations, market duties, CometBFT's side, signing, checks) are mixed
    into ``Simulation``, which sets this state up and runs the loop."""

    cfg: SimConfig
    rng: random.Random
    stats: SimStats
    app: Lockstep
    chain: StakeChain
    accounts: list[Ed25519Signer]
    signers: list[Ed25519Signer]
    by_address: dict[bytes, Ed25519Signer]
    cons_pool: list[Ed25519Signer]
    cheaters: dict[tuple[int, int, bytes], bool]  # (job, round, target) -> votes invalid
    votes: dict[tuple[int, int, bytes, bytes], tx_pb2.Msg]  # committed votes to open later
    down: bytes  # the validator missing most blocks in the current burst

    @property
    def store(self) -> MerkleStore:
        return self.app.store

    def fail(self, why: str) -> None:
        raise SimulationFailure(f"seed {self.cfg.seed}, height {self.store.height + 1}: {why}")

    # -- randomness helpers ------------------------------------------------------------------------
    def chance(self, p: float) -> bool:
        return self.rng.random() < p

    def amount(self, have: int) -> int:
        r = self.rng.random()
        if r < 0.05:
            return 0
        if r < 0.10:
            return have + 1 + self.rng.randrange(LOCO)  # more than there is
        if r < 0.15:
            return have
        if r < 0.55:
            return self.rng.randint(1, 10_000)
        return self.rng.randint(1, max(1, have // 4))

    def pick(self, xs: list[Any]) -> Any:
        return xs[self.rng.randrange(len(xs))] if xs else None

    # -- state helpers -----------------------------------------------------------------------------
    def _validators(self) -> list[tuple[bytes, Any]]:
        return list(staking_keeper.iterate_validators(self.store))

    def _providers(self) -> list[Any]:
        return list(providers_keeper.iterate_providers(self.store))

    def live_rounds(self) -> list[jobs_pb2.Round]:
        out = []
        for key, _ in self.store.iterate(ROUND_DUE_PREFIX, prefix_end(ROUND_DUE_PREFIX)):
            _, job_id, round_ = parse_round_due_key(key)
            r = jobs_keeper.get_round(self.store, job_id, round_)
            if r is not None:
                out.append(r)
        return sorted(out, key=lambda r: (r.job_id, r.round))


class _RandomOps(_SimState):
    """The random transactions of every module, valid and invalid."""

    def op_send(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        k = self.pick(self.signers)
        r = self.rng.random()
        to = (
            self.pick(sorted(MODULE_ACCOUNTS))
            if r < 0.05
            else hashlib.sha256(b"fresh%d" % self.rng.randrange(50)).digest()[:20]
            if r < 0.2
            else self.pick(self.signers).address
        )
        return k, send_msg(to, self.amount(bank.get_balance(self.store, k.address)))

    def op_onboard(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        """A new account, funded by an existing one: providers tombstoned for fraud never come
        back, so without newcomers a long run's market would run out of providers."""
        k = signer(10_000 + len(self.accounts))
        self.accounts.append(k)
        self.signers.append(k)
        self.by_address[k.address] = k
        funder = self.pick(self.accounts[:-1])
        # sometimes more than the funder holds: the rejected branch, whatever the run's balances
        amount = (
            bank.get_balance(self.store, funder.address) + 1 if self.chance(0.1) else 20_000 * LOCO
        )
        return funder, send_msg(k.address, amount)

    def op_withdraw(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        """Settlement: tokens into the EVM withdrawal escrow (the zero address is refused)."""
        k = self.pick(self.signers)
        to = (
            bytes(20)
            if self.chance(0.1)
            else hashlib.sha256(b"evm%d" % self.rng.randrange(20)).digest()[:20]
        )
        amount = self.amount(bank.get_balance(self.store, k.address) // 100)
        return k, tx_pb2.Msg(
            withdraw_to_evm=settlement_pb2.MsgWithdrawToEvm(evm_address=to, amount=amount)
        )

    def op_create_validator(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        k = self.pick(self.accounts)
        bond = self.pick([LOCO // 2, 20 * LOCO, 60 * LOCO, 150 * LOCO])
        return k, create_validator_msg(
            self.pick(self.cons_pool), bond, moniker=f"sim{self.rng.randrange(100)}"
        )

    def op_bond(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        vals = self._validators()
        cons = self.pick(vals)[0] if vals and self.chance(0.9) else b"\x07" * 20
        k = self.pick(self.signers)
        have = bank.get_balance(self.store, k.address)
        return k, bond_msg(cons, have + 1 if self.chance(0.05) else self.amount(50 * LOCO))

    def op_unbond(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        vals = self._validators()
        cons = self.pick(vals)[0] if vals else b"\x07" * 20
        bonds = staking_keeper.iterate_bonds(self.store, cons)
        if bonds and self.chance(0.85):
            who, have = self.pick(bonds)
            k = self.by_address.get(who) or self.pick(self.signers)
        else:
            k, have = self.pick(self.signers), 0
        amount = self.pick([have, have + 1, max(1, have // 3), self.rng.randint(1, LOCO)])
        return k, unbond_msg(cons, amount)

    def op_unjail(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        jailed = [(c, v) for c, v in self._validators() if v.jailed]
        if jailed and self.chance(0.85):
            cons, v = self.pick(jailed)
            k = self.by_address.get(v.operator) or self.pick(self.signers)
            if self.chance(0.3):  # top the self bond up first
                return k, bond_msg(cons, self.rng.randint(1, 5) * LOCO)
            return k, unjail_msg(cons)
        vals = self._validators()
        return self.pick(self.signers), unjail_msg(self.pick(vals)[0] if vals else b"\x07" * 20)

    def op_register(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        k = self.pick(self.accounts)
        bond = self.pick([999 * LOCO, 1_000 * LOCO, 1_500 * LOCO, 3_000 * LOCO])
        kw: dict[str, Any] = {}
        r = self.rng.random()
        if r < 0.05:
            kw["hardware"] = []
        elif r < 0.08:
            kw["region"] = "Not A Region"
        elif r < 0.11:
            kw["endpoint"] = "ftp://x"
        return k, register_msg(bond, **kw)

    def op_update(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        ps = self._providers()
        k = (
            self.by_address[self.pick(ps).address]
            if ps and self.chance(0.9)
            else self.pick(self.accounts)
        )
        r = self.rng.random()
        if r < 0.5:
            return k, update_msg(add_bond=self.pick([1, LOCO, 200 * LOCO]))
        if r < 0.7:
            return k, update_msg(region=self.pick(["us-east", "eu-west", "BAD"]))
        if r < 0.85:
            return k, update_msg(throughput_tokens_per_sec=self.rng.randint(1, 10**6))
        return k, update_msg()  # nothing to update

    def op_exit(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        ps = self._providers()
        k = (
            self.by_address[self.pick(ps).address]
            if ps and self.chance(0.9)
            else self.pick(self.accounts)
        )
        return k, exit_msg()

    def op_create_job(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        k = self.pick(self.accounts)
        inner, interval = self.pick(SEGMENTS)
        parts = self.rng.randint(1, 3)
        spec: dict[str, Any] = dict(
            inner_steps=inner,
            trace_interval=interval,
            participants_per_round=parts,
            num_shards=self.rng.randint(parts, 8),
            verifiers_per_challenge=self.rng.randint(1, 4),
            challenge_bps=self.pick([500, 3_000, 10_000, 10_000]),
            min_reputation=self.pick([0, 0, 0, 3_000]),
            commit_blocks=self.rng.randint(3, 5),  # >= 3: commitments stop at D - 1
            reveal_blocks=self.rng.randint(2, 4),
            verdict_blocks=self.rng.randint(3, 4),
            attest_blocks=self.rng.randint(2, 4),
        )
        rounds, reward, vreward = (
            self.rng.randint(1, 3),
            self.rng.randint(1, 5) * LOCO,
            self.rng.randint(0, LOCO),
        )
        r = self.rng.random()  # about one in ten invalid
        if r < 0.02:
            spec["commit_blocks"] = 6
        elif r < 0.04:
            spec["participants_per_round"] = 0
        elif r < 0.06:
            spec["trace_interval"] = 3 if inner != 6 else 4
        elif r < 0.08:
            rounds = 5
        elif r < 0.10:
            reward = 0
        return k, create_job_msg(rounds, reward, vreward, **spec)

    def op_cancel(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        jobs = [
            j
            for j in jobs_keeper.iterate_jobs(self.store)
            if j.status == jobs_pb2.JOB_STATUS_ACTIVE
        ] or list(jobs_keeper.iterate_jobs(self.store))
        if not jobs:
            return self.pick(self.accounts), cancel_msg(1)
        j = self.pick(jobs)
        k = self.by_address.get(j.owner) if self.chance(0.8) else None
        return k or self.pick(self.accounts), cancel_msg(j.id)

    def op_stale(self) -> tuple[Ed25519Signer, tx_pb2.Msg]:
        """A market message for a round in another phase, or one that does not exist."""
        k = self.pick(self.accounts)
        job, rnd = self.rng.randint(1, 6), self.rng.randint(0, 3)
        return k, self.pick(
            [
                submit_msg(k.address, job, rnd),
                reveal_msg(k.address, job, rnd, 0),
                verdict_msg(job, rnd, self.pick(self.accounts).address, h("vote")),
                attest_msg(job, rnd, agg_hash(job, rnd)),
            ]
        )

    OPS: tuple[tuple[str, float], ...] = (
        ("send", 20),
        ("create_validator", 1.5),
        ("bond", 5),
        ("unbond", 5),
        ("unjail", 3),
        ("register", 5),
        ("update", 3),
        ("exit", 1.2),
        ("create_job", 4),
        ("cancel", 0.8),
        ("stale", 2),
        ("onboard", 0.7),
        ("withdraw", 1.5),
    )

    def random_op(self) -> tuple[str, Ed25519Signer, tx_pb2.Msg]:
        names = [n for n, _ in self.OPS]
        name = self.rng.choices(names, weights=[w for _, w in self.OPS])[0]
        k, msg = getattr(self, f"op_{name}")()
        return name, k, msg


class _MarketDuties(_SimState):
    """What the participants, verifiers and attesters of the live rounds send."""

    def duties(self) -> list[Duty]:
        """What each participant, verifier and attester of every live round sends this block:
        mostly its duty, sometimes nothing, sometimes something wrong."""
        out: list[Duty] = []
        for r in self.live_rounds():
            job = jobs_keeper.get_job(self.store, r.job_id)
            assert job is not None
            n_entries = job.spec.inner_steps // job.spec.trace_interval + 1
            for p in r.participants:
                out.extend(self._participant_duties(r, job, p, n_entries))
        return out

    def _participant_duties(
        self, r: jobs_pb2.Round, job: jobs_pb2.Job, p: jobs_pb2.Participant, n_entries: int
    ) -> list[Duty]:
        """The txs about one participant of a live round, by the round's phase."""
        k = self.by_address[p.address]
        if r.phase == jobs_pb2.PHASE_COMMIT and not p.HasField("commitment"):
            return self._commit(k, r, job, p, n_entries)
        if r.phase == jobs_pb2.PHASE_COMMIT and self.chance(0.05):
            # duplicate
            msg = submit_msg(p.address, r.job_id, r.round, r.base_model_hash, n_entries=n_entries)
            return [("commit_bad", k, msg)]
        if r.phase == jobs_pb2.PHASE_REVEAL and p.challenged and not p.HasField("reveal"):
            return self._reveal(k, r, p, n_entries)
        if (
            r.phase in (jobs_pb2.PHASE_VERDICT, jobs_pb2.PHASE_APPEAL)
            and p.challenged
            and p.HasField("reveal")
        ):
            return self._verdicts(r, p)
        if r.phase in (jobs_pb2.PHASE_VOTE_REVEAL, jobs_pb2.PHASE_APPEAL_REVEAL):
            return self._open_ends_and_votes(k, r, job, p, n_entries)
        if r.phase == jobs_pb2.PHASE_ATTEST:
            return self._attest(k, r, p)
        return []

    def _commit(
        self,
        k: Ed25519Signer,
        r: jobs_pb2.Round,
        job: jobs_pb2.Job,
        p: jobs_pb2.Participant,
        n_entries: int,
    ) -> list[Duty]:
        """The participant commits its trace (78%), misses the commit (8%) or commits wrong."""
        jid, rn, base = r.job_id, r.round, r.base_model_hash
        x = self.rng.random()
        if x < 0.78:
            cap = job.spec.inner_steps * job.spec.tokens_per_step
            tokens = self.rng.randint(1, cap)
            return [
                (
                    "commit",
                    k,
                    submit_msg(p.address, jid, rn, base, n_entries=n_entries, tokens=tokens),
                )
            ]
        if x < 0.86:
            return []  # missed commit
        other = self.pick(
            [q.address for q in r.participants if q.address != p.address] or [b"\x01" * 20]
        )
        wrong: list[Duty] = [
            (
                "commit_bad",
                k,
                submit_msg(p.address, jid, rn, h("not the base"), n_entries=n_entries),
            ),
            # bound to another
            ("commit_bad", k, submit_msg(other, jid, rn, base, n_entries=n_entries)),
            (
                "commit_bad",
                k,
                submit_msg(p.address, jid, rn, base, n_entries=n_entries, tokens=0),
            ),
            # a trace of the wrong length passes the leaf-0 binding proof (README: the size is
            # not pinned at submit); its honest-length reveal then fails
            (
                "commit_wrong_length",
                k,
                submit_msg(p.address, jid, rn, base, n_entries=n_entries + 1),
            ),
        ]
        return [self.pick(wrong)]

    def _reveal(
        self, k: Ed25519Signer, r: jobs_pb2.Round, p: jobs_pb2.Participant, n_entries: int
    ) -> list[Duty]:
        """The challenged participant reveals its segment (80%), a forged or another one (10%),
        or nothing."""
        jid, rn, base = r.job_id, r.round, r.base_model_hash
        x = self.rng.random()
        if x < 0.8:
            msg = reveal_msg(p.address, jid, rn, p.segment, n_entries=n_entries, base=base)
            return [("reveal", k, msg)]
        if x >= 0.9:
            return []
        bad = [
            reveal_msg(
                p.address,
                jid,
                rn,
                p.segment,
                n_entries=n_entries,
                base=base,
                start_state_hash=h("forged"),
            )
        ]
        if n_entries > 2:  # another segment than the challenged one
            bad.append(
                reveal_msg(
                    p.address,
                    jid,
                    rn,
                    (p.segment + 1) % (n_entries - 1),
                    n_entries=n_entries,
                    base=base,
                )
            )
        return [("reveal_bad", k, self.pick(bad))]

    def _verdicts(self, r: jobs_pb2.Round, p: jobs_pb2.Participant) -> list[Duty]:
        """Each verifier of the sitting panel commits a blind vote (mostly the truth about
        whether the participant cheated), stays silent or sends a malformed one."""
        jid, rn = r.job_id, r.round
        cheat = self.cheaters.setdefault((jid, rn, p.address), self.chance(0.2))
        panel = 0 if r.phase == jobs_pb2.PHASE_VERDICT else 1
        out: list[Duty] = []
        for v in p.verifiers:
            if v.vote_hash or v.panel != panel:
                continue
            x = self.rng.random()
            vk = self.by_address[v.address]
            if x < 0.08:
                continue  # silent
            if x < 0.14:
                out.append(("verdict_bad", vk, verdict_msg(jid, rn, p.address, b"short")))
                continue
            valid = (not cheat) if self.chance(0.9) else cheat
            commit, open_ = vote_msgs(r, p.address, v.address, valid, self.rng.randint(0, 10_000))
            self.votes[(jid, rn, p.address, v.address)] = open_
            out.append(("verdict", vk, commit))
        return out

    def _open_ends_and_votes(
        self,
        k: Ed25519Signer,
        r: jobs_pb2.Round,
        job: jobs_pb2.Job,
        p: jobs_pb2.Participant,
        n_entries: int,
    ) -> list[Duty]:
        """In tolerance mode the participant opens its segments' ends; the verifiers open the
        votes they committed (mostly)."""
        jid, rn, base = r.job_id, r.round, r.base_model_hash
        out: list[Duty] = []
        tolerance = job.spec.determinism_mode == jobs_pb2.DETERMINISM_MODE_TOLERANCE
        if (
            tolerance
            and r.phase == jobs_pb2.PHASE_VOTE_REVEAL
            and p.HasField("reveal")
            and self.chance(0.9)  # else it withholds its ends: a missed reveal
        ):
            out.extend(
                (
                    "open_end",
                    k,
                    open_end_msg(p.address, jid, rn, o.segment, n_entries=n_entries, base=base),
                )
                for o in p.reveals
                if not o.end_opened_height
            )
        for v in p.verifiers:
            key = (jid, rn, p.address, v.address)
            if v.vote_hash and not v.voted and key in self.votes and self.chance(0.95):
                out.append(("verdict", self.by_address[v.address], self.votes.pop(key)))
        return out

    def _attest(self, k: Ed25519Signer, r: jobs_pb2.Round, p: jobs_pb2.Participant) -> list[Duty]:
        """An accepted participant attests the aggregate (or another hash, or nothing); now and
        then one that was not accepted tries to."""
        jid, rn = r.job_id, r.round
        if p.outcome == jobs_pb2.OUTCOME_ACCEPTED and not p.attested_hash:
            x = self.rng.random()
            if x < 0.8:
                return [("attest", k, attest_msg(jid, rn, agg_hash(jid, rn)))]
            if x < 0.88:
                return [("attest", k, attest_msg(jid, rn, h(f"other/{jid}/{rn}")))]
        elif p.outcome != jobs_pb2.OUTCOME_ACCEPTED and self.chance(0.1):
            return [("attest_bad", k, attest_msg(jid, rn, agg_hash(jid, rn)))]
        return []


class _CometSide(_SimState):
    """CometBFT's side of a block: absentees from the last commit and evidence."""

    def absent(self, height: int) -> set[bytes]:
        """Validators missing from the decided last commit; always less than 1/3 of the power
        (else CometBFT could not have committed the block)."""
        if height < 2:
            return set()
        prev = self.chain.comet_set(height - 1)
        total = sum(prev.values())
        # every other 60 blocks one validator, the weakest when the burst starts (never the
        # proposer), is mostly down: it is jailed for downtime unless it keeps > 1/3 of the power
        if height % 120 == 60:
            self.down = min(
                ((p, c) for c, p in prev.items() if c != self.chain.vals[0].address),
                default=(0, b""),
            )[1]
        burst = (height // 60) % 2 == 1
        out: set[bytes] = set()
        for cons in sorted(prev):
            p = 0.9 if cons == self.down and burst else 0.03
            if cons != self.chain.vals[0].address and self.chance(p):
                out.add(cons)
        while out and 3 * sum(prev[c] for c in out) >= total:
            out.discard(max(out))
        return out

    def evidence(self, height: int) -> list[tuple[bytes, int]]:
        """Now and then a duplicate vote of some validator at a recent height (sometimes older
        than max_evidence_age, which must be ignored, or against one already tombstoned). Never
        against the only validator with power: jailing it empties the set and CometBFT halts
        (as in the Cosmos SDK; see abci_app/slashing/README.md), which ends a simulation."""
        if height % 150 == 75:  # at least one per 150 blocks, within the evidence age
            at = height - self.rng.randint(1, 30)
        elif height >= 5 and self.chance(1 / 150):
            at = max(1, height - self.rng.randint(1, 40))
        else:
            return []
        powered = {c for c, v in self._validators() if v.power}
        cands = sorted(c for c in self.chain.comet_set(at) if powered - {c})
        return [(self.pick(cands), at)] if cands else []


class _Signing(_SimState):
    """The block's messages signed into txs, a random few malformed."""

    def sign(
        self, items: list[tuple[str, Ed25519Signer, tx_pb2.Msg]], height: int
    ) -> tuple[list[bytes], list[str]]:
        """Signed txs with the sequences they need if every earlier tx of the block succeeds;
        a random few malformed (their label gets the fault appended)."""
        seqs = dict(self.chain.seqs)
        raws, labels = [], []
        for name, k, msg in items:
            s = seqs.get(k.address, 0)
            extra = self.pick([0, 0, 0, 1, 100])
            fault = (
                self.pick(list(MALFORMED))
                if not name.startswith(("commit", "reveal", "verdict", "attest"))
                and self.chance(0.15)
                else ""
            )
            chain_id, timeout = CHAIN_ID, 0
            if fault == "chain":
                chain_id = "other-chain"
            elif fault == "gap":
                s += 2
            elif fault == "replay":  # a sequence already used (below the committed one), else a gap
                done = self.chain.seqs.get(k.address, 0)
                s = done - 1 if done else s + 2
            elif fault == "timeout":
                timeout = height - 1
            elif fault == "fee":
                extra = 10**18  # more than the whole supply
            elif fault == "underfee":
                extra = -1
            raw = self._signed(k, msg, s, chain_id, timeout, extra)
            if fault == "badsig":
                env = tx_pb2.TxRaw.FromString(raw)
                env.signature = bytes(64)
                raw = env.SerializeToString(deterministic=True)
            elif fault == "garbage":
                raw = self.rng.randbytes(self.rng.randint(0, 80))
            if not fault:
                seqs[k.address] = s + 1
            raws.append(raw)
            labels.append(f"{name}/{fault}" if fault else name)
        return raws, labels

    def _signed(
        self, k: Ed25519Signer, msg: tx_pb2.Msg, s: int, chain_id: str, timeout: int, extra: int
    ) -> bytes:
        """The tx paying the chain's minimum fee plus ``extra``; ``extra < 0``: one uloco short
        of the minimum the tx needs."""

        def build(f: int) -> bytes:
            return build_tx(
                k, chain_id=chain_id, msgs=[msg], sequence=s, fee=f, timeout_height=timeout
            )

        fee, raw = fee_fixpoint(
            get_auth_params(self.store), 1, build, margin=lambda need: need + max(extra, 0)
        )
        return build(fee - 1) if extra < 0 else raw


class _Checks(_SimState):
    """The checks after every block and the statistics they feed."""

    def check_rejected_change_nothing(self, req: abci.RequestFinalizeBlock) -> None:
        blk = block_context(req, CHAIN_ID)
        sigs = SignatureCache()
        txs = list(req.txs)
        full = execute_block(self.store, blk, txs, sigs)
        ok = [(raw, r) for raw, r in zip(txs, full.tx_results, strict=True) if r.code == 0]
        if len(ok) == len(txs):
            return
        only = execute_block(self.store, blk, [raw for raw, _ in ok], sigs)
        self.stats.rejected_checks += 1
        if only.writes != full.writes:
            diff = sorted(
                k
                for k in set(only.writes) | set(full.writes)
                if only.writes.get(k) != full.writes.get(k)
            )
            self.fail(f"rejected txs changed state: keys {[k.hex() for k in diff[:5]]}")
        if [_bytes(e) for e in only.events] != [_bytes(e) for e in full.events]:
            self.fail("rejected txs changed the block's events")
        if [_bytes(r) for r in only.tx_results] != [_bytes(r) for _, r in ok]:
            self.fail("removing the rejected txs changed the results of the accepted ones")

    def check_supply(self, before: int, resp: abci.ResponseFinalizeBlock) -> None:
        minted = burned = 0
        for e in list(resp.events) + [e for t in resp.tx_results for e in t.events]:
            a = {x.key: x.value for x in e.attributes}
            if e.type == "block_reward.minted":
                minted += int(a["amount"])
            elif e.type in (
                "validator.slashed",
                "provider.slashed",
                "job.created",
            ):  # slashes, job creation fees
                burned += int(a["burned"])
        after = bank.get_supply(self.store)
        if after - before != minted - burned:
            self.fail(
                f"supply moved by {after - before}; events say minted {minted} - burned {burned}"
            )

    def check_validator_set(self, height: int) -> None:
        stored = {c: v.power for c, v in self._validators() if v.power}
        comet = self.chain.comet_set(height + 2)
        if stored != comet:
            self.fail(
                f"validator powers in the store {stored} != the set CometBFT will have {comet}"
            )
        if not comet:
            self.fail("the validator set is empty: CometBFT would halt")

    def record(
        self, labels: list[str], resp: abci.ResponseFinalizeBlock, seen: set[tuple[int, int, int]]
    ) -> None:
        st = self.stats
        st.blocks += 1
        for label, r in zip(labels, resp.tx_results, strict=True):
            st.txs += 1
            st.ok += r.code == 0
            if (r.codespace, r.code) == (
                "tx",
                15,
            ):  # ErrInternal keeps a chain alive, but it is a handler bug
                self.fail(f"{label}: a handler raised: {r.log}")
            st.codes[f"{label} {r.code if r.code == 0 else f'{r.codespace}/{r.code}'}"] += 1
        for e in list(resp.events) + [e for t in resp.tx_results for e in t.events]:
            detail = _EVENT_DETAIL.get(e.type)
            a = {x.key: x.value for x in e.attributes}
            st.events[f"{e.type}:{a[detail]}" if detail else e.type] += 1
        for r in self.live_rounds():
            if (r.job_id, r.round, r.phase) not in seen:
                seen.add((r.job_id, r.round, r.phase))
                st.phases[r.phase] += 1


class Simulation(_RandomOps, _MarketDuties, _CometSide, _Signing, _Checks):
    """The world (two apps in lockstep under a StakeChain, the accounts) and the block loop:
    each block's duties and random txs, signed, run and checked."""

    def __init__(self, cfg: SimConfig) -> None:
        self.cfg = cfg
        self.rng = random.Random(cfg.seed)  # the test's randomness; the chain only sees the txs
        self.stats = SimStats()
        self.app = Lockstep(self._new_app(first=True), self._new_app(first=False))
        self.chain = new_staking_chain(
            [100 * LOCO] * cfg.validators,
            n_keys=cfg.accounts,
            staking=GENESIS_STAKING,
            slashing=GENESIS_SLASHING,
            genesis=GENESIS_MARKET,
            make_app=lambda: self.app,
        )
        self.chain.salt = cfg.seed.to_bytes(8, "big")
        self.accounts = list(self.chain.keys)
        self.signers = self.accounts + list(self.chain.vals)
        self.by_address = {k.address: k for k in self.signers}
        self.cons_pool = [signer(3000 + i) for i in range(6)]  # consensus keys for new validators
        self.cheaters = {}
        self.votes = {}
        self.down = b""
        self.stats.events.clear()

    # -- apps ----------------------------------------------------------------------------------
    def _new_app(self, *, first: bool) -> Application:
        path = None if first or self.cfg.disk is None else self.cfg.disk
        return Application(
            MerkleStore(path, keep_recent=50), check_invariants=self.cfg.staged_invariants
        )

    def restart_second(self) -> None:
        """The second app stops after Commit and a new process reopens its file: Info must give
        the first app's height and hash."""
        self.app.b.store.close()
        self.app.b = self._new_app(first=False)
        info = self.app.b.info(abci.RequestInfo())
        a = self.app.a.store
        if (info.last_block_height, info.last_block_app_hash) != (a.height, a.app_hash):
            self.fail(
                f"after restart the second app is at {info.last_block_height} "
                f"{info.last_block_app_hash.hex()}"
            )
        self.stats.restarts += 1

    # -- the loop ---------------------------------------------------------------------------------
    def step(self, seen: set[tuple[int, int, int]]) -> None:
        height = self.store.height + 1
        ops = [self.random_op() for _ in range(self.rng.randint(0, self.cfg.ops_per_block))]
        raws, labels = self.sign(self.duties() + ops, height)
        evidence = self.evidence(height)
        # a downtime jail beside it could empty the set
        absent = set() if evidence else self.absent(height)
        if self.cfg.check_rejected:
            self.check_rejected_change_nothing(
                self.chain.request(raws, absent=absent, evidence=evidence)
            )
        for raw in raws:
            self.app.check_tx(abci.RequestCheckTx(tx=raw))
        supply = bank.get_supply(self.store)
        self.app.check_second = height % self.cfg.second_invariants_every == 0
        # lockstep; invariants on both
        resp = self.chain.block(raws, absent=absent, evidence=evidence)
        self.check_supply(supply, resp)
        self.check_validator_set(height)
        self.record(labels, resp, seen)
        if (
            self.cfg.restart_every
            and self.cfg.disk is not None
            and height % self.cfg.restart_every == 0
        ):
            self.restart_second()

    def run(self, progress: Callable[[SimStats, int], None] | None = None) -> SimStats:
        t0 = time.perf_counter()
        seen: set[tuple[int, int, int]] = set()
        for i in range(self.cfg.blocks):
            self.step(seen)
            if progress is not None:
                progress(self.stats, i + 1)
        self.stats.seconds = time.perf_counter() - t0
        self.stats.compared = self.app.compared
        return self.stats

    def close(self) -> None:
        self.app.b.store.close()


def simulate(cfg: SimConfig, progress: Callable[[SimStats, int], None] | None = None) -> SimStats:
    sim = Simulation(cfg)
    try:
        return sim.run(progress)
    finally:
        sim.close()
