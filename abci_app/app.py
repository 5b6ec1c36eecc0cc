"""ABCI 2.0 handlers over a pure block execution (docs/design.md §3.1).

``execute_block`` is the state transition: (committed state, BlockContext, txs) -> BlockResult.
It reads the clock and randomness from nothing but the block; the ABCI handlers around it only
move bytes between CometBFT and the store:

- ``finalize_block`` executes a block and *stages* its writes (the app hash comes back in the
  response); only ``commit`` persists, atomically with the height and app hash;
- ``info`` reports the last committed height and hash, so after a crash CometBFT replays
  exactly the blocks the store does not have;
- ``check_tx`` runs the same ante checks and messages on its own state copy (``_check``),
  reset to the committed state after every Commit (CometBFT then re-checks its mempool); its
  reads of the committed store are remembered until the next Commit (``ReadCache``);
- genesis (``init_chain``) is staged together with block ``initial_height`` and committed with it;
- state sync (``list/offer_snapshot``, ``load/apply_snapshot_chunk``): snapshots of committed
  heights are written in the background after Commit and restored onto an empty store, each
  chunk checked against the light-client-verified app hash (``abci_app/snapshots.py``).
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

from abci_app import vote_extensions
from abci_app.auth.keeper import process_sequence
from abci_app.auth.params import compute_min_fee, fee_params
from abci_app.bank import keeper as bank
from abci_app.bank.keys import FEE_COLLECTOR
from abci_app.codec.address import to_bech32
from abci_app.codec.tx import MAX_TX_BYTES, SignatureCache, Tx, decode_tx
from abci_app.context import BlockContext, Ctx, Misbehavior, Vote, event
from abci_app.encoding import decode_amount, encode_amount, encode_uvarint
from abci_app.errors import (
    ErrInsufficientFee,
    ErrInternal,
    ErrTxTimeout,
    ErrWrongChainId,
    GenesisError,
    InvariantBroken,
    LoconetError,
)
from abci_app.modules import META_PREFIX, MODULES, QUERIES, ROUTES
from abci_app.pb import abci
from abci_app.querying import PROOF_TYPE, QueryError, parse_path, to_json
from abci_app.slashing.params import get_params as slashing_params
from abci_app.snapshots import Restore, Snapshotter
from abci_app.staking.params import get_params as staking_params
from abci_app.store import CacheKV, KVReader, MerkleStore, ReadCache, StoreError

APP_VERSION = 1
META_CHAIN_ID = META_PREFIX + b"chain_id"
META_BLOCK_TIME = META_PREFIX + b"block_time"


# ---------------------------------------------------------------------------------------------
# pure block execution


def _app_state(raw: bytes) -> dict[str, Any]:
    """The genesis app_state: a JSON object whose keys are module names (a misspelt module,
    "bnak", was silently ignored and the chain started without its balances)."""
    try:
        state = json.loads(raw or b"{}")
    except ValueError as e:
        raise GenesisError(f"genesis app_state is not JSON: {e}") from None
    if not isinstance(state, dict):
        raise GenesisError(
            f"genesis app_state must be a JSON object of module states, got {type(state).__name__}"
        )
    known = sorted(m.name for m in MODULES)
    unknown = sorted(str(k) for k in state if k not in known)
    if unknown:
        raise GenesisError(f"genesis app_state has unknown modules {unknown}: known are {known}")
    return state


@dataclass(slots=True)
class BlockResult:
    tx_results: list[abci.ExecTxResult]
    events: list[abci.Event]
    validator_updates: list[abci.ValidatorUpdate]
    writes: dict[bytes, bytes | None] = field(default_factory=dict)


def check_envelope(tx: Tx, block: BlockContext) -> None:
    if tx.chain_id != block.chain_id:
        raise ErrWrongChainId(f"tx is for chain {tx.chain_id!r}, this chain is {block.chain_id!r}")
    if tx.timeout_height and block.height > tx.timeout_height:
        raise ErrTxTimeout(f"tx timed out at height {tx.timeout_height}; block is {block.height}")


def process_ante(ctx: Ctx, tx: Tx) -> None:
    """Minimum fee, sequence and fee (signature and envelope are checked before)."""
    floor = compute_min_fee(fee_params(ctx.store), len(tx.raw), len(tx.msgs))
    if tx.fee < floor:
        raise ErrInsufficientFee(
            f"fee {tx.fee} uloco is below the minimum {floor} uloco (auth params: "
            f"min_fee_per_byte x {len(tx.raw)} bytes + min_fee_per_msg x {len(tx.msgs)} "
            f"messages): pay at least {floor} uloco (--fee)"
        )
    process_sequence(ctx.store, tx.signer, tx.public_key, tx.sequence)
    if tx.fee:
        bank.send(ctx.store, tx.signer, FEE_COLLECTOR, tx.fee)
    if ctx.recording:
        signer = to_bech32(tx.signer)
        ctx.emit(event("tx", signer=signer, acc_seq=f"{signer}/{tx.sequence}", fee=tx.fee))


def process_tx(ctx: Ctx, raw: bytes, sigs: SignatureCache) -> abci.ExecTxResult:
    """Run one tx in a child context; its writes and events survive only if all of it succeeds."""
    try:
        cached = sigs.lookup(raw)
        tx = cached or decode_tx(raw)
        check_envelope(tx, ctx.block)
        if cached is None:
            sigs.verify(tx)
        child = ctx.child()
        process_ante(child, tx)
        for kind, msg in tx.msgs:
            ROUTES[kind](child, tx.signer, msg)
    except LoconetError as e:
        return abci.ExecTxResult(code=e.code, codespace=e.codespace, log=e.log)
    except (ArithmeticError, ValueError, TypeError, IndexError, KeyError) as e:
        # deterministic (a function of state and tx bytes); InvariantBroken, MemoryError and
        # RecursionError are none of these and still halt the node. Benign for consensus: the
        # log is not part of the results hash.
        err = ErrInternal(
            f"internal error executing the tx ({type(e).__name__}: {e}); nothing was changed"
        )
        return abci.ExecTxResult(code=err.code, codespace=err.codespace, log=err.log)
    ctx.commit_child(child)
    return abci.ExecTxResult(code=0, events=child.events)


def execute_block(
    state: KVReader, block: BlockContext, txs: list[bytes], sigs: SignatureCache
) -> BlockResult:
    """The state transition. Hooks run in ``MODULES`` order: begin-block (liveness, evidence),
    the txs in block order, end-block (rounds, fees and rewards, validator updates)."""
    store = CacheKV(state)
    votes, injected = vote_extensions.split_block(txs)
    if injected:
        block = replace(block, vote_extensions=votes, beacon=vote_extensions.block_beacon(votes))
    begin = Ctx(block, store)
    for m in MODULES:
        if m.begin_block is not None:
            m.begin_block(begin)
    ctx = Ctx(block, store)
    results = [abci.ExecTxResult(code=0)] * injected + [
        process_tx(ctx, raw, sigs) for raw in txs[injected:]
    ]
    end = Ctx(block, store)
    updates: list[abci.ValidatorUpdate] = []
    for m in MODULES:
        if m.end_block is not None:
            updates.extend(m.end_block(end))
    store.set(META_BLOCK_TIME, encode_amount(block.time_ns))
    return BlockResult(results, begin.events + end.events, updates, store.writes())


def data_size(raw: bytes) -> int:
    """The bytes one tx adds to a block's ``Data`` (``repeated bytes txs = 1``: tag, length,
    bytes), the measure of CometBFT's ``ComputeProtoSizeForTxs`` and ``max_tx_bytes``."""
    return 1 + len(encode_uvarint(len(raw))) + len(raw)


def check_invariants(reader: KVReader) -> None:
    """Every module's invariants; raises InvariantBroken (the node halts)."""
    held = 0
    for m in MODULES:
        if m.invariants is not None:
            held += m.invariants(reader)
    if held:
        supply = bank.get_supply(reader)
        balances = sum(v for _, v in bank.iterate_balances(reader))
        if balances + held != supply:
            raise InvariantBroken(
                f"supply {supply} != balances {balances} + held by modules {held}"
            )


def check_genesis_params(store: KVReader) -> None:
    """Cross-module parameter rules that no single module can check on its own."""
    evidence_age = slashing_params(store).max_evidence_age_blocks
    unbonding = staking_params(store).unbonding_blocks
    if evidence_age > unbonding:
        raise ValueError(
            f"genesis: slashing.max_evidence_age_blocks ({evidence_age}) exceeds "
            f"staking.unbonding_blocks ({unbonding}): a validator could unbond before its double "
            "sign is punished; lower the first or raise the second"
        )


def block_context(
    req: abci.RequestFinalizeBlock, chain_id: str, last_app_hash: bytes = b""
) -> BlockContext:
    votes = tuple(
        Vote(v.validator.address, v.validator.power, v.block_id_flag == 2)  # BLOCK_ID_FLAG_COMMIT
        for v in req.decided_last_commit.votes
    )
    evidence = tuple(
        Misbehavior(int(m.type), m.validator.address, m.height, m.validator.power)
        for m in req.misbehavior
    )
    return BlockContext(
        height=req.height,
        time_ns=req.time.seconds * 10**9 + req.time.nanos,
        proposer=req.proposer_address,
        block_hash=req.hash,
        chain_id=chain_id,
        last_commit=votes,
        misbehavior=evidence,
        last_app_hash=last_app_hash,
    )


# ---------------------------------------------------------------------------------------------
# ABCI


class HistoricalReader:
    """A KVReader over the committed state at a past height."""

    def __init__(self, store: MerkleStore, height: int) -> None:
        self._s, self._h = store, height
        # a pruned or future height fails here, before any argument
        store.get_at(META_CHAIN_ID, height)

    def get(self, key: bytes) -> bytes | None:
        return self._s.get_at(key, self._h)

    def iterate(self, start: bytes, end: bytes | None = None):
        return self._s.iterate_at(self._h, start, end)


class Application:
    def __init__(
        self,
        store: MerkleStore,
        *,
        check_invariants: bool = False,
        snapshots: Snapshotter | None = None,
        extension_keys: vote_extensions.ExtensionKeys | None = None,
    ) -> None:
        self.store = store
        # signs this node's vote extensions
        self.extension_keys = extension_keys or vote_extensions.ExtensionKeys()
        self.snapshots = snapshots  # takes and serves state-sync snapshots (None: serves none)
        self._restore: Restore | None = None  # the snapshot being applied (state sync)
        self.sigs = SignatureCache()
        self.check_invariants = check_invariants
        self._genesis: CacheKV | None = None  # genesis writes, staged with the first block
        self._staged: int | None = None
        # reads of the committed store, remembered until the next Commit (``_fresh_reads``): the
        # CheckTx state and the next FinalizeBlock both read through it
        self._reads = ReadCache(store)
        self._check = CacheKV(self._reads)
        self._check_block: BlockContext | None = None
        self._pool: Any = None
        self.verify_threads = 2

    # -- helpers --------------------------------------------------------------------------------
    @property
    def chain_id(self) -> str:
        raw = self.store.get(META_CHAIN_ID)
        if raw is None and self._genesis is not None:
            raw = self._genesis.get(META_CHAIN_ID)
        return raw.decode() if raw else ""

    def _base(self) -> KVReader:
        return self._genesis if self._genesis is not None else self.store

    def _fresh_reads(self) -> None:
        """After the committed store changed (Commit, a restored snapshot): forget what was read
        from it, and start a new CheckTx state on it."""
        self._reads = ReadCache(self.store)
        self._check = CacheKV(self._reads)
        self._check_block = None

    def _exec_base(self) -> KVReader:
        """What FinalizeBlock executes on: the genesis writes for the first block, else the
        committed store through ``_reads``. A ReadCache returns exactly what the store returns
        (the store's reads change only at Commit, which replaces it; ``stage`` keeps the staged
        block apart), so results and app hashes do not depend on it; it saves a SQLite query
        per read of a key CheckTx or an earlier tx of the block already read."""
        return self._genesis if self._genesis is not None else self._reads

    def _check_ctx(self) -> Ctx:
        if self._check_block is None:  # computed once per committed height
            t = decode_amount(self._check.get(META_BLOCK_TIME))
            self._check_block = BlockContext(self.store.height + 1, t, b"", b"", self.chain_id)
        return Ctx(self._check_block, self._check, recording=False)  # CheckTx returns no events

    # -- info / genesis -------------------------------------------------------------------------
    def info(self, req: abci.RequestInfo) -> abci.ResponseInfo:
        h = self.store.height
        return abci.ResponseInfo(
            data="loconet",
            version="0.1.0",
            app_version=APP_VERSION,
            last_block_height=h,
            last_block_app_hash=self.store.app_hash if h else b"",
        )

    def init_chain(self, req: abci.RequestInitChain) -> abci.ResponseInitChain:
        if self.store.height != 0:
            raise RuntimeError("InitChain on a store that already has blocks")
        if req.initial_height not in (0, 1):
            raise RuntimeError("loconet supports initial_height 1 only")
        app_state = _app_state(req.app_state_bytes)
        g = CacheKV(self.store)
        g.set(META_CHAIN_ID, req.chain_id.encode())
        g.set(META_BLOCK_TIME, encode_amount(req.time.seconds * 10**9 + req.time.nanos))
        validators: list[abci.ValidatorUpdate] = []
        for m in MODULES:
            if m.init_genesis is not None:
                state = app_state.get(m.name, {})
                if not isinstance(state, dict):
                    raise GenesisError(
                        f"genesis app_state.{m.name} must be a JSON object, got "
                        f"{type(state).__name__}"
                    )
                try:
                    validators.extend(m.init_genesis(g, state, req) or [])
                except GenesisError:
                    raise
                except LoconetError as e:
                    raise GenesisError(f"genesis app_state.{m.name}: {e.log}") from None
                except (ValueError, TypeError, KeyError, AttributeError, IndexError) as e:
                    # a field of the wrong shape deep in a module's genesis: name the module
                    # and what was wrong rather than halting with a traceback
                    what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
                    raise GenesisError(f"genesis app_state.{m.name}: {what}"[:1000]) from None
        check_genesis_params(g)
        if self.check_invariants:
            check_invariants(g)
        self._genesis = g
        app_hash = self.store.stage(1, g.writes())
        self._check = CacheKV(g)
        self._check_block = None
        return abci.ResponseInitChain(app_hash=app_hash, validators=validators)

    # -- mempool --------------------------------------------------------------------------------
    def preverify(self, txs: list[bytes]) -> None:
        """Check the signatures of a batch of pipelined txs in parallel before they are executed
        one by one (a cache warm-up: results do not depend on it)."""
        if self._pool is None:
            self._pool = ThreadPoolExecutor(self.verify_threads, thread_name_prefix="sigverify")
        self.sigs.preverify(txs, self._pool, self.verify_threads, self.chain_id)

    def check_tx(self, req: abci.RequestCheckTx) -> abci.ResponseCheckTx:
        r = process_tx(self._check_ctx(), req.tx, self.sigs)
        return abci.ResponseCheckTx(code=r.code, codespace=r.codespace, log=r.log, gas_wanted=1)

    # -- proposals ------------------------------------------------------------------------------
    def _stateless_ok(self, raw: bytes) -> bool:
        # a cache hit says only "the signature verifies", a pure function of the bytes; the
        # chain id is checked on every path. It was skipped on a hit, so a foreign-chain tx
        # primed into one node's cache (CheckTx batches preverify before refusing it) made that
        # node accept a proposal its peers rejected
        try:
            tx = self.sigs.lookup(raw) or decode_tx(raw)
            if tx.chain_id != self.chain_id:
                return False
            self.sigs.verify(tx)  # returns at once when cached
        except LoconetError:
            return False
        return True

    def prepare_proposal(self, req: abci.RequestPrepareProposal) -> abci.ResponsePrepareProposal:
        """The mempool's txs in order, stateless-invalid ones dropped, after the injected vote
        extensions; the block's tx data stays within ``max_tx_bytes`` as CometBFT measures it
        (``data_size``: each tx costs its protobuf framing too). CometBFT's reaper already
        fills ``max_tx_bytes`` without the injected tx, so the last reaped txs make room for it;
        a proposal over the bound is a CONSENSUS FAILURE that stops the proposer's consensus."""
        out, size = [], 0
        injected = vote_extensions.inject(self._base(), req.local_last_commit, req.height)
        if injected is not None:
            out.append(injected)
            size += data_size(injected)
        for raw in req.txs:
            n = data_size(raw)
            if size + n > req.max_tx_bytes:
                break
            if self._stateless_ok(raw):
                out.append(raw)
                size += n
        return abci.ResponsePrepareProposal(txs=out)

    def process_proposal(self, req: abci.RequestProcessProposal) -> abci.ResponseProcessProposal:
        why, txs = vote_extensions.check_proposal(
            self._base(), req.proposed_last_commit, list(req.txs), req.height, self.chain_id
        )
        ok = why is None and all(
            len(raw) <= MAX_TX_BYTES and self._stateless_ok(raw) for raw in txs
        )
        status = abci.ResponseProcessProposal.ACCEPT if ok else abci.ResponseProcessProposal.REJECT
        return abci.ResponseProcessProposal(status=status)

    def extend_vote(self, req: abci.RequestExtendVote) -> abci.ResponseExtendVote:
        ext = vote_extensions.extend_vote(
            self._base(), req.height, self.chain_id, self.extension_keys
        )
        return abci.ResponseExtendVote(vote_extension=ext)

    def verify_vote_extension(
        self, req: abci.RequestVerifyVoteExtension
    ) -> abci.ResponseVerifyVoteExtension:
        ok = vote_extensions.verify_vote_extension(
            self._base(), req.validator_address, req.height, self.chain_id, req.vote_extension
        )
        s = abci.ResponseVerifyVoteExtension
        return s(status=s.ACCEPT if ok else s.REJECT)

    # -- block ----------------------------------------------------------------------------------
    def finalize_block(self, req: abci.RequestFinalizeBlock) -> abci.ResponseFinalizeBlock:
        if req.height != self.store.height + 1:
            raise RuntimeError(
                f"FinalizeBlock at height {req.height}; store is at {self.store.height}"
            )
        block = block_context(req, self.chain_id, self.store.app_hash if self.store.height else b"")
        result = execute_block(self._exec_base(), block, list(req.txs), self.sigs)
        writes = result.writes
        if self._genesis is not None:
            merged = self._genesis.writes()
            merged.update(writes)
            writes = merged
        if self.check_invariants:
            view = CacheKV(self.store)
            for k, v in writes.items():
                view.set(k, v) if v is not None else view.delete(k)
            check_invariants(view)
        app_hash = self.store.stage(req.height, writes)
        self._staged = req.height
        return abci.ResponseFinalizeBlock(
            tx_results=result.tx_results,
            events=result.events,
            validator_updates=result.validator_updates,
            app_hash=app_hash,
        )

    def commit(self, req: abci.RequestCommit) -> abci.ResponseCommit:
        if self._staged != self.store.height + 1:
            raise RuntimeError("Commit without a finalized block")
        self.store.commit()
        self._staged = None
        self._genesis = None
        self._fresh_reads()
        if self.snapshots is not None:
            self.snapshots.on_commit(self.store.height)  # written by a background thread
        return abci.ResponseCommit(retain_height=0)

    # -- queries --------------------------------------------------------------------------------
    def simulate(self, raw: bytes) -> abci.ResponseQuery:
        """``/simulate`` (data = a signed tx): run it as CheckTx would, on a throwaway copy of the
        mempool state, and return {code, codespace, log, events}; nothing is kept (a dry run)."""
        check = self._check_ctx()
        r = process_tx(Ctx(check.block, CacheKV(check.store)), raw, self.sigs)  # with events
        events = [
            {"type": e.type, "attributes": {a.key: a.value for a in e.attributes}} for e in r.events
        ]
        value = to_json({"code": r.code, "codespace": r.codespace, "log": r.log, "events": events})
        return abci.ResponseQuery(code=0, value=value, height=self.store.height)

    def query(self, req: abci.RequestQuery) -> abci.ResponseQuery:
        height = req.height or self.store.height
        if req.path == "/simulate":
            return self.simulate(req.data)
        try:
            if req.height < 0:
                raise ValueError(
                    f"height {req.height} is negative: give a committed height, or 0 for the latest"
                )
            reader: KVReader = (
                self.store if height == self.store.height else HistoricalReader(self.store, height)
            )
            parts, params = parse_path(req.path)
            if not parts or parts[0] not in QUERIES:
                known = ", ".join(f"/{r}" for r in sorted(QUERIES))
                shown = req.path if len(req.path) <= 100 else req.path[:100] + "..."
                raise QueryError(f"unknown query path {shown!r}; known: {known}")
            value, keys = QUERIES[parts[0]](reader, parts[1:], params)
            params.refuse_unread(req.path)
            resp = abci.ResponseQuery(code=0, value=value, height=height)
            if req.prove:
                for k in keys:
                    resp.proof_ops.ops.add(
                        type=PROOF_TYPE, key=k, data=self.store.prove(k, height).to_bytes()
                    )
            return resp
        except QueryError as e:
            return abci.ResponseQuery(code=e.code, codespace="query", log=str(e), height=height)
        except (
            StoreError,
            ValueError,
            OverflowError,
            LoconetError,
        ) as e:  # pruned/future height, bad input
            log = e.log if isinstance(e, LoconetError) else str(e)
            return abci.ResponseQuery(code=2, codespace="query", log=log, height=height)

    # -- state sync (abci_app/snapshots.py) ----------------------------------------------------
    def list_snapshots(self, req: abci.RequestListSnapshots) -> abci.ResponseListSnapshots:
        return abci.ResponseListSnapshots(snapshots=self.snapshots.list() if self.snapshots else [])

    def load_snapshot_chunk(
        self, req: abci.RequestLoadSnapshotChunk
    ) -> abci.ResponseLoadSnapshotChunk:
        chunk = (
            self.snapshots.load_chunk(req.height, req.format, req.chunk) if self.snapshots else b""
        )
        return abci.ResponseLoadSnapshotChunk(chunk=chunk)

    def offer_snapshot(self, req: abci.RequestOfferSnapshot) -> abci.ResponseOfferSnapshot:
        """Accepted only by an empty store; ``req.app_hash`` is the light-client-verified app hash
        of the snapshot's height, which the restored root must equal."""
        if self.store.height != 0 or self._genesis is not None:
            return abci.ResponseOfferSnapshot(result=abci.ResponseOfferSnapshot.ABORT)
        result = Restore.check_offer(req.snapshot, req.app_hash)
        self._restore = (
            Restore(req.snapshot, req.app_hash)
            if result == abci.ResponseOfferSnapshot.ACCEPT
            else None
        )
        return abci.ResponseOfferSnapshot(result=result)

    def apply_snapshot_chunk(
        self, req: abci.RequestApplySnapshotChunk
    ) -> abci.ResponseApplySnapshotChunk:
        r = self._restore
        if r is None or self.store.height != 0:
            return abci.ResponseApplySnapshotChunk(result=abci.ResponseApplySnapshotChunk.ABORT)
        resp, last = r.apply(req.index, req.chunk, req.sender)
        if resp.result == abci.ResponseApplySnapshotChunk.REJECT_SNAPSHOT:
            self._restore = None
        if not last:
            return resp
        self._restore = None
        resp = r.finish(self.store)
        self._fresh_reads()
        return resp

    def invariants(self) -> None:
        """Check every module invariant on the committed state (tests)."""
        check_invariants(self.store)


__all__ = ["Application", "BlockContext", "BlockResult", "InvariantBroken", "execute_block"]
