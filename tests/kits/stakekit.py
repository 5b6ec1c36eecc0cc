"""Staking/slashing test kit: a chain whose genesis bonds stake (the new staking genesis format),
and a block driver that feeds CometBFT-like inputs: the decided last commit of the validator set
that really signed block H-1 (updates from FinalizeBlock H take effect at H+2, as in CometBFT),
chosen absentees, and duplicate-vote evidence. Invariants are checked after every block."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Callable, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Any

from abci_app.app import Application
from abci_app.bank import keeper as bank
from abci_app.codec.address import to_bech32
from abci_app.codec.tx import Ed25519Signer, decode_tx
from abci_app.pb import abci, staking_pb2, tx_pb2
from abci_app.staking import keeper as sk
from abci_app.store import MerkleStore
from tests.kits.chainkit import CHAIN_ID, min_fee_tx, signer

LOCO = 1_000_000


def create_validator_msg(
    cons_key: Ed25519Signer, self_bond: int, moniker: str = "new"
) -> tx_pb2.Msg:
    return tx_pb2.Msg(
        create_validator=staking_pb2.MsgCreateValidator(
            pub_key=cons_key.public_bytes(), self_bond=self_bond, moniker=moniker
        )
    )


def bond_msg(cons: bytes, amount: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(bond=staking_pb2.MsgBond(validator=cons, amount=amount))


def unbond_msg(cons: bytes, amount: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(unbond=staking_pb2.MsgUnbond(validator=cons, amount=amount))


def unjail_msg(cons: bytes) -> tx_pb2.Msg:
    return tx_pb2.Msg(unjail=staking_pb2.MsgUnjail(validator=cons))


def follow_updates(
    sets: dict[int, dict[bytes, int]], current: dict[bytes, int], h: int, updates: Any
) -> None:
    """CometBFT applies the validator updates of FinalizeBlock h at height h+2: record that set."""
    if not updates:
        return
    nxt = dict(current)
    for u in updates:
        cons = hashlib.sha256(u.pub_key.ed25519).digest()[:20]
        if u.power:
            nxt[cons] = u.power
        else:
            nxt.pop(cons, None)
    sets[h + 2] = nxt


@dataclass
class StakeChain:
    app: Application
    keys: list[Ed25519Signer]  # funded accounts
    vals: list[Ed25519Signer]  # consensus keys; each is also its own operator account
    sets: dict[int, dict[bytes, int]] = field(default_factory=dict)  # height -> CometBFT's set
    seqs: dict[bytes, int] = field(default_factory=dict)
    last: abci.ResponseFinalizeBlock | None = None
    salt: bytes = (
        b""  # mixed into the block hashes (the seed of the job draws); b"" = the pinned hashes
    )

    @property
    def store(self) -> MerkleStore:
        return self.app.store

    @property
    def height(self) -> int:
        return self.store.height

    def comet_set(self, h: int) -> dict[bytes, int]:
        while h not in self.sets:
            h -= 1
        return self.sets[h]

    def tx(
        self,
        k: Ed25519Signer,
        msgs: list[tx_pb2.Msg],
        fee: int | None = None,
        *,
        seq: int | None = None,
    ) -> bytes:
        """A signed tx; ``fee=None`` pays exactly the chain's minimum fee (chainkit.min_fee_tx)."""
        s = self.seqs.get(k.address, 0) if seq is None else seq
        return min_fee_tx(self.store, k, msgs, fee, chain_id=CHAIN_ID, sequence=s)

    def app_hash_if(self, txs: list[bytes]) -> bytes:
        """The app hash the next block would have with these txs (staged, not committed)."""
        return self.app.finalize_block(self.request(txs)).app_hash

    def request(
        self,
        txs: Sequence[bytes] = (),
        *,
        absent: AbstractSet[bytes] = frozenset(),
        evidence: Sequence[tuple[bytes, int]] = (),
    ) -> abci.RequestFinalizeBlock:
        h = self.height + 1
        req = abci.RequestFinalizeBlock(
            txs=list(txs),
            height=h,
            proposer_address=self.vals[0].address,
            hash=hashlib.sha256(self.salt + b"block%d" % h).digest(),
        )
        req.time.seconds = 1_700_000_000 + h
        if h >= 2:
            for cons, power in sorted(self.comet_set(h - 1).items()):
                v = req.decided_last_commit.votes.add(block_id_flag=1 if cons in absent else 2)
                v.validator.address, v.validator.power = cons, power
        for cons, eh in evidence:
            m = req.misbehavior.add(
                type=abci.MisbehaviorType.DUPLICATE_VOTE, height=eh, total_voting_power=1
            )
            m.validator.address, m.validator.power = cons, self.comet_set(eh).get(cons, 0)
        return req

    def block(
        self,
        txs: Sequence[bytes] = (),
        *,
        absent: AbstractSet[bytes] = frozenset(),
        evidence: Sequence[tuple[bytes, int]] = (),
    ) -> abci.ResponseFinalizeBlock:
        h = self.height + 1
        resp = self.app.finalize_block(self.request(txs, absent=absent, evidence=evidence))
        self.app.commit(abci.RequestCommit())
        self.app.invariants()
        follow_updates(self.sets, self.comet_set(h + 1), h, resp.validator_updates)
        for raw, r in zip(txs, resp.tx_results, strict=True):
            if r.code == 0:
                t = decode_tx(raw)
                self.seqs[t.signer] = t.sequence + 1
        self.last = resp
        return resp

    def blocks(self, n: int, **kw: Any) -> None:
        for _ in range(n):
            self.block([], **kw)

    def ok(
        self, k: Ed25519Signer, msgs: list[tx_pb2.Msg], fee: int | None = None
    ) -> abci.ResponseFinalizeBlock:
        resp = self.block([self.tx(k, msgs, fee)])
        r = resp.tx_results[0]
        assert r.code == 0, r.log
        return resp

    def balance(self, addr: bytes) -> int:
        return bank.get_balance(self.store, addr)

    def validator(self, cons: bytes) -> staking_pb2.Validator:
        v = sk.get_validator(self.store, cons)
        assert v is not None
        return v

    def query(self, path: str) -> Any:
        r = self.app.query(abci.RequestQuery(path=path))
        assert r.code == 0, r.log
        return json.loads(r.value)


def new_staking_chain(
    self_bonds: list[int] = (100 * LOCO,) * 1,  # type: ignore[assignment]
    *,
    n_keys: int = 3,
    funds: int = 10**12,
    staking: dict[str, Any] | None = None,
    slashing: dict[str, Any] | None = None,
    genesis: dict[str, Any] | None = None,
    make_app: Callable[[], Any] | None = None,
) -> StakeChain:
    """``genesis``: more app_state sections (e.g. providers and jobs params); ``make_app``: the
    application to drive (default: one Application on an in-memory store, invariants on)."""
    keys = [signer(i) for i in range(n_keys)]
    vals = [signer(2000 + i) for i in range(len(self_bonds))]
    slashing = dict(slashing or {})
    if staking and "unbonding_blocks" in staking and "max_evidence_age_blocks" not in slashing:
        # genesis requires evidence age <= unbonding period (else a validator unbonds before
        # judgement)
        slashing["max_evidence_age_blocks"] = min(int(staking["unbonding_blocks"]), 100)
    balances = {k.address: funds for k in keys} | {v.address: funds for v in vals}
    app_state = {
        "bank": {
            "balances": [
                {"address": to_bech32(a), "amount": str(b)} for a, b in sorted(balances.items())
            ]
        },
        "staking": {
            "params": staking or {},
            "validators": [
                {
                    "pub_key": base64.b64encode(v.public_bytes()).decode(),
                    "operator": to_bech32(v.address),
                    "moniker": f"val{i}",
                    "self_bond": str(b),
                }
                for i, (v, b) in enumerate(zip(vals, self_bonds, strict=True))
            ],
        },
        "slashing": {"params": slashing or {}},
    } | dict(genesis or {})
    req = abci.RequestInitChain(
        chain_id=CHAIN_ID, initial_height=1, app_state_bytes=json.dumps(app_state).encode()
    )
    req.time.seconds = 1_700_000_000
    app = (
        make_app()
        if make_app
        else Application(MerkleStore(None, keep_recent=50), check_invariants=True)
    )
    app.info(abci.RequestInfo())
    resp = app.init_chain(req)
    c = StakeChain(app, keys, vals)
    c.sets[1] = {hashlib.sha256(u.pub_key.ed25519).digest()[:20]: u.power for u in resp.validators}
    c.init_response = resp  # type: ignore[attr-defined]
    c.block([])
    return c
