"""Test kit for the state machine: an Application on an in-memory store, funded keys,
tx builders, a block driver that finalizes + commits and checks invariants each block, and
``assert_rejected``: the one check every ``test_invalid_*`` that sends a tx uses.

The genesis has the chain's default auth params (a real minimum fee), and ``Chain.tx`` pays
exactly the minimum unless given ``fee=`` (``min_fee_tx``: the same fixpoint the CLI uses)."""

from __future__ import annotations

import base64
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from abci_app.app import Application, block_context, execute_block
from abci_app.auth.params import fee_fixpoint
from abci_app.auth.params import get_params as get_auth_params
from abci_app.codec.address import to_bech32
from abci_app.codec.tx import Ed25519Signer, SignatureCache, build_tx
from abci_app.errors import LoconetError
from abci_app.pb import abci, bank_pb2, keys_pb2, tx_pb2
from abci_app.store import KVReader, MerkleStore

CHAIN_ID = "loconet-test"


def min_fee_tx(
    store: KVReader, k: Ed25519Signer, msgs: list[tx_pb2.Msg], fee: int | None = None, **kw
) -> bytes:
    """``build_tx(k, msgs=msgs, fee=fee, **kw)``; ``fee=None``: exactly the minimum fee of the
    chain's auth params in ``store`` for these signed bytes (the fee's own varint included)."""
    if fee is not None:
        return build_tx(k, msgs=msgs, fee=fee, **kw)
    return fee_fixpoint(
        get_auth_params(store), len(msgs), lambda f: build_tx(k, msgs=msgs, fee=f, **kw)
    )[1]


def signer(i: int) -> Ed25519Signer:
    return Ed25519Signer(hashlib.sha256(f"test-key-{i}".encode()).digest())


def send_msg(to: bytes, amount: int) -> tx_pb2.Msg:
    return tx_pb2.Msg(send=bank_pb2.MsgSend(to_address=to, amount=amount))


def tx_fee(resp: abci.ResponseFinalizeBlock, i: int | None = 0) -> int:
    """The fee tx ``i`` of a block paid (its ``tx`` event), for balance checks to the uloco;
    ``i=None``: the fees of every accepted tx of the block."""
    results = resp.tx_results if i is None else [resp.tx_results[i]]
    fees = [
        int({a.key: a.value for a in e.attributes}["fee"])
        for r in results
        for e in r.events
        if e.type == "tx"
    ]
    if i is not None and not fees:
        raise AssertionError(f"tx {i} has no tx event (rejected?): {resp.tx_results[i].log}")
    return sum(fees)


def genesis_request(
    balances: dict[bytes, int],
    validators: list[tuple[Ed25519Signer, int]],
    chain_id: str = CHAIN_ID,
) -> abci.RequestInitChain:
    app_state = {
        "bank": {
            "balances": [
                {"address": to_bech32(a), "amount": str(v)} for a, v in sorted(balances.items())
            ]
        },
        "staking": {
            "validators": [
                {
                    "pub_key": base64.b64encode(k.public_bytes()).decode(),
                    "operator": to_bech32(k.address),
                    "moniker": f"v{i}",
                }
                for i, (k, _) in enumerate(validators)
            ]
        },
    }
    req = abci.RequestInitChain(
        chain_id=chain_id, initial_height=1, app_state_bytes=json.dumps(app_state).encode()
    )
    req.time.seconds = 1_700_000_000
    for k, power in validators:
        req.validators.add(pub_key=keys_pb2.PublicKey(ed25519=k.public_bytes()), power=power)
    return req


@dataclass
class Chain:
    app: Application
    keys: list[Ed25519Signer]
    validators: list[Ed25519Signer]
    seqs: dict[bytes, int] = field(default_factory=dict)
    height: int = 0

    @property
    def store(self) -> MerkleStore:
        return self.app.store

    def tx(
        self,
        k: Ed25519Signer,
        msgs: list[tx_pb2.Msg],
        *,
        fee: int | None = None,
        seq: int | None = None,
        chain_id: str = CHAIN_ID,
        memo: str = "",
        timeout_height: int = 0,
    ) -> bytes:
        """A signed tx; ``fee=None`` pays exactly the chain's minimum (``min_fee_tx``)."""
        s = self.seqs.get(k.address, 0) if seq is None else seq
        return min_fee_tx(
            self.store,
            k,
            chain_id=chain_id,
            msgs=msgs,
            sequence=s,
            fee=fee,
            memo=memo,
            timeout_height=timeout_height,
        )

    def request(self, txs: list[bytes]) -> abci.RequestFinalizeBlock:
        """The next block's FinalizeBlock request (height, proposer, hash and time fixed by
        height)."""
        h = self.store.height + 1
        req = abci.RequestFinalizeBlock(
            txs=txs,
            height=h,
            proposer_address=self.validators[0].address,
            hash=hashlib.sha256(b"block%d" % h).digest(),
        )
        req.time.seconds = 1_700_000_000 + h
        return req

    def finalize(self, txs: list[bytes]) -> abci.ResponseFinalizeBlock:
        return self.app.finalize_block(self.request(txs))

    def block(self, txs: list[bytes]) -> abci.ResponseFinalizeBlock:
        resp = self.finalize(txs)
        self.app.commit(abci.RequestCommit())
        self.app.invariants()
        for raw, r in zip(txs, resp.tx_results, strict=True):
            if r.code == 0:
                from abci_app.codec.tx import decode_tx

                t = decode_tx(raw)
                self.seqs[t.signer] = t.sequence + 1
        return resp

    def check(self, raw: bytes) -> abci.ResponseCheckTx:
        return self.app.check_tx(abci.RequestCheckTx(tx=raw))


# The market kit's (marketkit.new_market) reputations start at 5,000 with no probation floor
# (the figures every kit test was written against); tests of the probation rules pass the
# chain's defaults (``abci_app.providers.params.DEFAULTS``), which start a new key at the floor.
KIT_PROVIDERS_PARAMS: dict[str, int] = {"initial_reputation": 5_000, "reputation_floor": 0}
# ... and their draws take every provider a job asks for (tests of the reservation of verifiers
# pass {"reserve_verifiers": 1}, the chain's default)
KIT_JOBS_PARAMS: dict[str, int] = {"reserve_verifiers": 0}


def new_chain(
    n_keys: int = 4,
    funds: int = 10**12,
    n_validators: int = 1,
    powers: list[int] | None = None,
    auth_params: dict[str, int] | None = None,
    jobs_params: dict[str, int] | None = None,
    providers_params: dict[str, int] | None = None,
) -> Chain:
    """``auth_params``: the genesis ``auth.params`` (None: the chain's defaults, a real floor);
    ``jobs_params`` / ``providers_params``: genesis ``jobs.params`` / ``providers.params``
    overrides (None: the defaults; ``marketkit.new_market`` adds ``KIT_PROVIDERS_PARAMS`` and
    ``KIT_JOBS_PARAMS``)."""
    keys = [signer(i) for i in range(n_keys)]
    vals = [signer(1000 + i) for i in range(n_validators)]
    powers = powers or [10] * n_validators
    app = Application(MerkleStore(None, keep_recent=50), check_invariants=True)
    app.info(abci.RequestInfo())
    req = genesis_request({k.address: funds for k in keys}, list(zip(vals, powers, strict=True)))
    if auth_params is not None or jobs_params is not None or providers_params is not None:
        state = json.loads(req.app_state_bytes)
        if auth_params is not None:
            state["auth"] = {"params": auth_params}
        if jobs_params is not None:
            state.setdefault("jobs", {}).setdefault("params", {}).update(jobs_params)
        if providers_params is not None:
            state.setdefault("providers", {}).setdefault("params", {}).update(providers_params)
        req.app_state_bytes = json.dumps(state).encode()
    app.init_chain(req)
    c = Chain(app, keys, vals)
    c.block([])  # block 1 commits genesis
    return c


def snapshot(c: Chain) -> dict[bytes, bytes]:
    """The whole committed state, for 'a rejected tx changes nothing' checks."""
    return dict(c.store.iterate(b""))


class BlockDriver(Protocol):
    """What ``assert_rejected`` needs of a chain kit (``Chain``, stakekit's ``StakeChain``)."""

    app: Application

    @property
    def store(self) -> MerkleStore: ...

    def request(self, txs: list[bytes]) -> abci.RequestFinalizeBlock: ...

    def block(self, txs: list[bytes]) -> abci.ResponseFinalizeBlock: ...


def assert_rejected(
    chain: BlockDriver,
    raw: bytes,
    err: type[LoconetError],
    *,
    before: Sequence[bytes] = (),
    after: Sequence[bytes] = (),
) -> abci.ExecTxResult:
    """The one check for a tx that must fail (every ``test_invalid_*`` that sends one):

    - CheckTx and FinalizeBlock both answer ``err``'s code *and* codespace, with a log;
    - executing the next block with the tx gives exactly the writes, the same event types and the
      same results for the other txs as the same block without it (nothing changed: no fee, no
      sequence, no partial message);

    then commits that block, with the tx, and returns the tx's result (for checks on its log).
    ``before`` / ``after``: other txs of the same block, around the rejected one."""
    txs, others = [*before, raw, *after], [*before, *after]
    blk = block_context(chain.request(txs), chain.app.chain_id)
    with_tx = execute_block(chain.store, blk, txs, SignatureCache())
    without = execute_block(chain.store, blk, others, SignatureCache())
    assert with_tx.writes == without.writes, "a rejected tx changed state"
    assert [e.type for e in with_tx.events] == [e.type for e in without.events]
    results = list(with_tx.tx_results)
    del results[len(before)]
    assert [(r.code, r.codespace) for r in results] == [
        (r.code, r.codespace) for r in without.tx_results
    ]
    check = chain.app.check_tx(abci.RequestCheckTx(tx=raw))
    assert (check.code, check.codespace) == (err.code, err.codespace), check.log
    res = chain.block(txs).tx_results[len(before)]
    assert (res.code, res.codespace) == (err.code, err.codespace), res.log
    assert check.log and res.log
    return res
