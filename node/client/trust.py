"""Which validator set to believe: skipping verification from the genesis the user holds.

``node.client.light`` checks that a header was signed by more than 2/3 of *a* validator set whose
hash the header names. Alone, that set is whatever the node says, so a node that forges a whole
chain with its own keys (under the real chain id) passes. With a node home (``--home`` holding
``config/genesis.json``) the client knows the set that signs height 1: the one the app's own
InitChain computes from that genesis (run here in memory, the same code the validators ran).
From there every header is trusted as CometBFT's light client trusts it (its
``light/verifier.go``), in skipping mode with trust level 1/3:

* **adjacent** (``h = t + 1``): the header's ``validators_hash`` must be the trusted header's
  ``next_validators_hash``;
* **skipping** (``t + 1 < h <= t + period``): validators of the trusted set ``V(t)`` holding
  more than 1/3 of its power must have signed the commit of ``h`` (at least one of them honest,
  as long as fewer than 1/3 of ``V(t)`` are faulty);
* otherwise, **bisection**: trust a header between the two first (the midpoint when the
  overlap is too small, ``t + period`` when ``h`` is too far), then go on from it.

``period`` (blocks) is two thirds of the genesis's ``staking.unbonding_blocks``: a set older
than its unbonding period can sign a false history without being slashable (a long-range
attack), so trust never skips further than that. Each trusted header's height, hash,
validators and ``next_validators_hash`` are kept in ``HOME/data/light_trust.json`` (written
atomically), so later checks start from the newest trusted height below the one asked.

A chain far past its first unbonding period: a walk from genesis takes one header per
``period`` blocks and is only as safe as the genesis validators' keys are today, so the user can
pin a recent header by its hash (``loconet trust HEIGHT HASH --home H``, ``TrustStore.pin``),
as CometBFT's light client asks for a trusted header; later checks start from it.
"""

from __future__ import annotations

import base64
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from abci_app.codec.address import address_from_pubkey
from abci_app.pb import abci, keys_pb2
from abci_app.store import MerkleStore
from node import safejson
from node.atomic import write_atomic
from node.client.light import (
    HeaderInvalid,
    Validator,
    _hex,
    fetch_validators,
    header_hash,
    validator_set_hash,
    verify_signed_header,
)
from node.client.rpc import Client

TRUST_FILE = "light_trust.json"
KEEP = 64  # trusted heights kept in the file (the newest)
MAX_STEPS = 10_000  # headers one check may fetch before it gives up (what it verified is kept)


@dataclass(frozen=True)
class Trusted:
    height: int  # 0: the genesis anchor (its "next" set signs height 1)
    header_hash: bytes
    validators: tuple[Validator, ...]  # the set that signed `height` (for 0: height 1's)
    next_validators_hash: bytes


def _sorted(vals: list[Validator]) -> list[Validator]:
    """CometBFT's validator set order: voting power descending, then address ascending."""
    return sorted(vals, key=lambda v: (-v.power, v.address))


def genesis_validators(genesis: dict[str, Any]) -> list[Validator]:
    """The validator set of height 1: the app's InitChain on ``genesis`` (in memory), or the
    genesis file's own validators when InitChain returns none (CometBFT's rule)."""
    from abci_app.app import Application  # lazy: the whole app, 0.2 s at every --help

    req = abci.RequestInitChain(
        chain_id=str(genesis.get("chain_id", "")),
        initial_height=int(genesis.get("initial_height", 1) or 1),
        app_state_bytes=json.dumps(genesis.get("app_state") or {}).encode(),
    )
    for v in genesis.get("validators") or []:
        req.validators.add(
            pub_key=keys_pb2.PublicKey(ed25519=base64.b64decode(v["pub_key"]["value"])),
            power=int(v["power"]),
        )
    resp = Application(MerkleStore(None)).init_chain(req)
    updates = resp.validators or req.validators
    return _sorted(
        [
            Validator(address_from_pubkey(u.pub_key.ed25519), u.pub_key.ed25519, u.power)
            for u in updates
            if u.power > 0
        ]
    )


def _val_json(v: Validator) -> list[str | int]:
    return [v.address.hex(), v.pub_key.hex(), v.power]


def _val(x: list[Any]) -> Validator:
    return Validator(bytes.fromhex(x[0]), bytes.fromhex(x[1]), int(x[2]))


class TrustStore:
    """The trusted headers of one node home's chain (see the module docstring)."""

    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        self.path = self.home / "data" / TRUST_FILE
        raw = (self.home / "config" / "genesis.json").read_bytes()
        genesis = safejson.loads(raw)
        self.chain_id = str(genesis.get("chain_id", ""))
        self.genesis_sha = hashlib.sha256(raw).hexdigest()
        staking = (genesis.get("app_state") or {}).get("staking") or {}
        unbonding = int((staking.get("params") or {}).get("unbonding_blocks", 100))
        self.period = max(1, 2 * unbonding // 3)
        self._genesis = genesis
        self.trusted: dict[int, Trusted] = {}
        self._load()

    def _anchor(self) -> None:
        """The genesis anchor, computed on first use (a chain-id mismatch is said first)."""
        if 0 in self.trusted:
            return
        try:
            vals = genesis_validators(self._genesis)
        except Exception as e:  # noqa: BLE001 (a genesis the app refuses: named, no traceback)
            raise HeaderInvalid(
                f"cannot compute the genesis validator set from {self.home}/config/genesis.json: "
                f"{str(e)[:300]}"
            ) from None
        if not vals:
            raise HeaderInvalid(
                f"{self.home}/config/genesis.json names no validator: nothing to trust"
            )
        self.trusted[0] = Trusted(0, b"", tuple(vals), validator_set_hash(vals))

    def _load(self) -> bool:
        try:
            d = safejson.loads(self.path.read_bytes())
            if not isinstance(d, dict) or d.get("genesis_sha256") != self.genesis_sha:
                return False  # another genesis (a chain reset), or not ours: start again
            for t in d["trusted"]:
                self.trusted[int(t["height"])] = Trusted(
                    int(t["height"]),
                    bytes.fromhex(t["header_hash"]),
                    tuple(_val(x) for x in t["validators"]),
                    bytes.fromhex(t["next_validators_hash"]),
                )
            return 0 in self.trusted
        except Exception:  # noqa: BLE001 (missing or damaged, whatever its shape: rebuilt)
            self.trusted.clear()
            return False

    def _save(self) -> None:
        keep = [0, *sorted(h for h in self.trusted if h)[-KEEP:]]
        body = {
            "genesis_sha256": self.genesis_sha,
            "trusted": [
                {
                    "height": t.height,
                    "header_hash": t.header_hash.hex(),
                    "validators": [_val_json(v) for v in t.validators],
                    "next_validators_hash": t.next_validators_hash.hex(),
                }
                for t in (self.trusted[h] for h in keep)
            ],
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, json.dumps(body) + "\n")
        except OSError:
            pass  # a read-only home: trust is rebuilt next time, nothing is wrong

    # -- verification -----------------------------------------------------------------------

    def _fetch(self, client: Client, h: int) -> tuple[dict[str, Any], list[Validator]]:
        sh = client.call("commit", height=str(h))["signed_header"]
        hdr = sh["header"]
        if hdr.get("chain_id") != self.chain_id:
            raise HeaderInvalid(
                f"header {h} is of chain {str(hdr.get('chain_id'))[:60]!r}, not the genesis's "
                f"{self.chain_id!r}"
            )
        got = {int(hdr["height"]), int(sh["commit"]["height"])}
        if got != {h}:
            raise HeaderInvalid(f"asked for header {h}, the node answered heights {sorted(got)}")
        vals = fetch_validators(client, h)
        verify_signed_header(sh, vals)  # its own set: hash matches, > 2/3 signed
        return sh, vals

    @staticmethod
    def _overlap_ok(trusted: Trusted, sh: dict[str, Any], vals: list[Validator]) -> bool:
        """More than 1/3 of the trusted set's power signed this commit. The signatures were
        checked by ``verify_signed_header`` against ``vals``; a trusted validator counts only
        with the same key and a COMMIT vote in this commit."""
        own = {v.address: v.pub_key for v in vals}
        signers = {
            _hex(s["validator_address"])
            for s in sh["commit"]["signatures"]
            if int(s["block_id_flag"]) == 2
        }
        total = sum(v.power for v in trusted.validators)
        signed = sum(
            v.power
            for v in trusted.validators
            if v.address in signers and own.get(v.address) == v.pub_key
        )
        return 3 * signed > total

    def _record(self, sh: dict[str, Any], vals: list[Validator]) -> Trusted:
        hdr = sh["header"]
        t = Trusted(
            int(hdr["height"]),
            header_hash(hdr),
            tuple(vals),
            _hex(hdr["next_validators_hash"]),
        )
        self.trusted[t.height] = t
        return t

    def verified_header(self, client: Client, height: int) -> dict[str, Any]:
        """Header ``height``, trusted from genesis as the module docstring says. Raises
        HeaderInvalid."""
        if height < 1:
            raise HeaderInvalid(f"height must be >= 1, got {height}")
        sh, vals = self._fetch(client, height)
        self._anchor()
        have = self.trusted.get(height)
        if have is not None:
            if header_hash(sh["header"]) != have.header_hash:
                raise HeaderInvalid(
                    f"header {height} is not the one trusted before at that height: a fork; "
                    "do not trust this node"
                )
            return sh["header"]
        pending: list[tuple[int, tuple[dict[str, Any], list[Validator]] | None]] = [
            (height, (sh, vals))
        ]
        try:
            self._walk(client, height, pending)
        finally:
            self._save()  # what was verified stays verified, even when the walk gave up
        return sh["header"]

    def _walk(
        self,
        client: Client,
        height: int,
        pending: list[tuple[int, tuple[dict[str, Any], list[Validator]] | None]],
    ) -> None:
        """Trust every header of ``pending`` (the asked one first), bisecting as needed;
        MAX_STEPS bounds the headers fetched."""
        fetched = 0
        while pending:
            h, got = pending[-1]
            base = self.trusted[max(t for t in self.trusted if t < h)]
            if h - base.height > self.period and h != base.height + 1:
                pending.append((base.height + self.period, None))
                continue
            if got is None:
                fetched += 1
                if fetched > MAX_STEPS:
                    raise HeaderInvalid(
                        f"more than {MAX_STEPS} headers needed to reach {height} from the newest "
                        f"trusted one; run the command again to go on from where this stopped"
                    )
                got = self._fetch(client, h)
            sh_h, vals_h = got
            pending[-1] = (h, got)
            if h == base.height + 1:
                if _hex(sh_h["header"]["validators_hash"]) != base.next_validators_hash:
                    raise HeaderInvalid(
                        f"header {h} is not signed by the validator set header {base.height} "
                        "named as next: do not trust this node"
                    )
            elif not self._overlap_ok(base, sh_h, vals_h):
                if h - base.height <= 1:  # cannot split further
                    raise HeaderInvalid(f"header {h} cannot be trusted")
                pending.append(((base.height + h) // 2, None))
                continue
            self._record(sh_h, vals_h)
            pending.pop()

    def pin(self, client: Client, height: int, want: bytes) -> Trusted:
        """Trust header ``height`` because the user says its hash is ``want`` (from a
        source they trust: their own node, a block explorer, a friend): weak subjectivity, the
        way back in for a chain far past its first unbonding period. The node's header must
        have that hash and be signed by >2/3 of the set it names; a different header already
        trusted at that height is refused (a fork). Later checks start from it."""
        if height < 1:
            raise HeaderInvalid(f"height must be >= 1, got {height}")
        sh, vals = self._fetch(client, height)
        got = header_hash(sh["header"])
        if got != want:
            raise HeaderInvalid(
                f"the node's header {height} has hash {got.hex().upper()}, not "
                f"{want.hex().upper()}: a node of another chain or a fork"
            )
        self._anchor()
        have = self.trusted.get(height)
        if have is not None and have.header_hash != want:
            raise HeaderInvalid(
                f"header {height} already trusted with hash {have.header_hash.hex().upper()}: "
                "the two cannot both be this chain's"
            )
        t = self._record(sh, vals)
        self._save()
        return t


def trust_store(home: str | Path | None) -> TrustStore | None:
    """The trust store of a node home (one with ``config/genesis.json``), else None."""
    if not home or not (Path(home) / "config" / "genesis.json").is_file():
        return None
    try:
        return TrustStore(Path(home))
    except Exception as e:  # noqa: BLE001 (any shape of genesis: one line naming the file)
        raise HeaderInvalid(
            f"cannot read {home}/config/genesis.json ({type(e).__name__}: {str(e)[:300]})"
        ) from None
