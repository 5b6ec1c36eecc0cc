"""The transaction envelope (docs/design.md §3.2): strict decoding, sign bytes, signing.

Wire format: ``TxRaw{body_bytes, auth_info_bytes, signature}`` (proto/loconet/tx/v1/tx.proto).
The signature is ed25519 over ``sign_bytes(chain_id, body_bytes, auth_info_bytes)``: the exact
bytes sent, length-prefixed, behind a domain tag; nothing is re-serialised before verifying.

Decoding is strict: every protobuf layer must re-encode (deterministically) to exactly the bytes
received and carry no unknown fields (checked at every depth of every message), so one transaction
has exactly one encoding; trailing bytes, duplicated fields and non-minimal varints are rejected as
``ErrTxDecode``. A ``Msg`` whose oneof is unset (a message type this node does not know) is
``ErrUnknownMessage``.

Signature checks use libsodium (PyNaCl), about 2x faster than OpenSSL through ``cryptography``
on this machine class (ANCHORS: 11,300/s vs 5,800/s); keys are generated and used for signing
with ``cryptography``. Results are cached by tx hash, so a node verifies a tx once even though
it sees it in CheckTx, ProcessProposal and FinalizeBlock.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from concurrent.futures import Executor
from dataclasses import dataclass

from google.protobuf.message import DecodeError, Message
from google.protobuf.unknown_fields import UnknownFieldSet
from nacl.exceptions import BadSignatureError, CryptoError
from nacl.signing import VerifyKey

from abci_app.codec.address import address_from_pubkey
from abci_app.encoding import encode_uvarint
from abci_app.errors import (
    ErrEmptyTx,
    ErrInvalidPubKey,
    ErrInvalidSignature,
    ErrMemoTooLong,
    ErrTxDecode,
    ErrTxTooLarge,
    ErrUnknownMessage,
    TxError,
)
from abci_app.pb import tx_pb2

SIGN_DOMAIN = b"loconet/tx/v1"
MAX_TX_BYTES = 64 * 1024
MAX_MEMO_BYTES = 256
MAX_MSGS = 64


def sign_bytes(chain_id: str, body_bytes: bytes, auth_info_bytes: bytes) -> bytes:
    cid = chain_id.encode()
    return b"".join(
        (
            SIGN_DOMAIN,
            encode_uvarint(len(cid)),
            cid,
            encode_uvarint(len(body_bytes)),
            body_bytes,
            encode_uvarint(len(auth_info_bytes)),
            auth_info_bytes,
        )
    )


@dataclass(frozen=True, slots=True)
class Tx:
    """A structurally valid, decoded transaction (signature not yet checked)."""

    raw: bytes
    hash: bytes  # sha256(raw): the hash CometBFT indexes the tx under
    body: tx_pb2.TxBody
    msgs: tuple[tuple[str, Message], ...]  # (oneof field name, message)
    public_key: bytes
    signer: bytes  # 20-byte address
    sequence: int
    fee: int
    chain_id: str
    signature: bytes
    body_bytes: bytes
    auth_info_bytes: bytes

    @property
    def memo(self) -> str:
        return self.body.memo

    @property
    def timeout_height(self) -> int:
        return self.body.timeout_height


def _strict(cls: type[Message], data: bytes, what: str) -> Message:
    try:
        msg = cls.FromString(data)
    except DecodeError as e:
        raise ErrTxDecode(f"{what}: malformed protobuf ({e})") from None
    _check_canonical(msg, data, what)
    return msg


def _check_canonical(msg: Message, data: bytes, what: str) -> None:
    if len(UnknownFieldSet(msg)):
        raise ErrTxDecode(f"{what}: unknown fields or trailing bytes")
    if msg.SerializeToString(deterministic=True) != data:
        raise ErrTxDecode(
            f"{what}: non-canonical encoding (duplicated fields, trailing bytes or padding)"
        )


def _unknown_field_path(msg: Message, path: str = "") -> str | None:
    """The path of the first (sub)message of ``msg`` that carries unknown fields, else None: a
    field this node does not know, at any depth, would otherwise be stored in state as it came
    (a JobSpec's unknown field inside a Job record), so one tx would have two meanings."""
    if len(UnknownFieldSet(msg)):
        return path
    for fd, value in msg.ListFields():
        if fd.message_type is None:
            continue
        if fd.message_type.GetOptions().map_entry:
            items = [
                (f"{path}{fd.name}[{k!r}]", v) for k, v in value.items() if isinstance(v, Message)
            ]
        elif fd.is_repeated:
            items = [(f"{path}{fd.name}[{j}]", v) for j, v in enumerate(value)]
        else:
            items = [(f"{path}{fd.name}", value)]
        for sub_path, sub in items:
            found = _unknown_field_path(sub, sub_path + ".")
            if found is not None:
                return found.rstrip(".")
    return None


def decode_tx(raw: bytes, *, max_tx_bytes: int = MAX_TX_BYTES) -> Tx:
    """Decode and structurally validate a tx. Raises a TxError subclass; never anything else."""
    if len(raw) > max_tx_bytes:
        raise ErrTxTooLarge(f"tx is {len(raw)} bytes; the limit is {max_tx_bytes}")
    if not raw:
        raise ErrTxDecode("empty tx")
    env = _strict(tx_pb2.TxRaw, raw, "TxRaw")
    assert isinstance(env, tx_pb2.TxRaw)
    body = _strict(tx_pb2.TxBody, env.body_bytes, "TxBody")
    auth = _strict(tx_pb2.AuthInfo, env.auth_info_bytes, "AuthInfo")
    assert isinstance(body, tx_pb2.TxBody) and isinstance(auth, tx_pb2.AuthInfo)
    if len(env.signature) != 64:
        raise ErrInvalidSignature(f"signature must be 64 bytes, got {len(env.signature)}")
    if len(auth.public_key) != 32:
        raise ErrInvalidPubKey(f"public key must be 32 bytes (ed25519), got {len(auth.public_key)}")
    if not body.messages:
        raise ErrEmptyTx("tx has no messages")
    if len(body.messages) > MAX_MSGS:
        raise ErrTxTooLarge(f"tx has {len(body.messages)} messages; the limit is {MAX_MSGS}")
    if len(body.memo.encode()) > MAX_MEMO_BYTES:
        raise ErrMemoTooLong(
            f"memo is {len(body.memo.encode())} bytes; the limit is {MAX_MEMO_BYTES}"
        )
    msgs: list[tuple[str, Message]] = []
    for i, m in enumerate(body.messages):
        kind = m.WhichOneof("sum")
        if kind is None:
            raise ErrUnknownMessage(f"message {i} has a type this node does not know")
        inner = getattr(m, kind)
        where = _unknown_field_path(m)
        if where is not None:
            raise ErrTxDecode(
                f"message {i} ({kind}): unknown fields in {where or 'the Msg wrapper'}"
            )
        msgs.append((kind, inner))
    return Tx(
        raw=raw,
        hash=hashlib.sha256(raw).digest(),
        body=body,
        msgs=tuple(msgs),
        public_key=auth.public_key,
        signer=address_from_pubkey(auth.public_key),
        sequence=auth.sequence,
        fee=auth.fee,
        chain_id=auth.chain_id,
        signature=env.signature,
        body_bytes=env.body_bytes,
        auth_info_bytes=env.auth_info_bytes,
    )


class SignatureCache:
    """Decoded txs whose signature verified, keyed by their exact bytes (decoding and signature
    validity are pure functions of the bytes), so a node decodes and verifies a tx once although
    it sees it in CheckTx, ProcessProposal and FinalizeBlock. Bounded, least recently used out,
    by count and by bytes: a tx's signature verifies before its fee is checked, so anyone can
    fill the cache for free (CheckTx, /simulate) with 64 KiB txs that then fail; 200,000 of them
    pinned ~25 GB (raw bytes plus their decoded copies). ``capacity_bytes`` counts each entry
    as twice its raw size plus a fixed overhead."""

    ENTRY_OVERHEAD = 600  # the Tx object, its message tuple and the dict slot, roughly

    def __init__(self, capacity: int = 200_000, capacity_bytes: int = 256 << 20) -> None:
        self._ok: OrderedDict[bytes, Tx] = OrderedDict()
        self._capacity = capacity
        self._capacity_bytes = capacity_bytes
        self._bytes = 0

    def lookup(self, raw: bytes) -> Tx | None:
        tx = self._ok.get(raw)
        if tx is not None:
            self._ok.move_to_end(raw)
        return tx

    def verify(self, tx: Tx) -> None:
        if tx.raw in self._ok:
            return
        if not _signature_ok(tx):
            raise ErrInvalidSignature("signature does not verify for the signer's public key")
        self._remember(tx)

    @classmethod
    def _cost(cls, raw: bytes) -> int:
        return 2 * len(raw) + cls.ENTRY_OVERHEAD

    @property
    def cached_bytes(self) -> int:
        return self._bytes

    def __len__(self) -> int:
        return len(self._ok)

    def _remember(self, tx: Tx) -> None:
        if tx.raw in self._ok:
            return
        self._ok[tx.raw] = tx
        self._bytes += self._cost(tx.raw)
        while len(self._ok) > 1 and (
            len(self._ok) > self._capacity or self._bytes > self._capacity_bytes
        ):
            old, _ = self._ok.popitem(last=False)
            self._bytes -= self._cost(old)

    def preverify(
        self, raws: list[bytes], pool: Executor, workers: int, chain_id: str | None = None
    ) -> None:
        """Decode and verify a batch of txs on ``workers`` threads (libsodium releases the GIL)
        and remember the valid ones; invalid ones, and with ``chain_id`` those signed for
        another chain (CheckTx refuses them: they would only take cache space), are left for
        the sequential path to report."""
        txs = []
        for raw in raws:
            if raw in self._ok:
                continue
            try:
                tx = decode_tx(raw)
            except TxError:
                continue
            if chain_id is None or tx.chain_id == chain_id:
                txs.append(tx)
        if len(txs) < 2 * workers:
            return
        chunks = [txs[i::workers] for i in range(workers)]
        results = pool.map(lambda c: [_signature_ok(t) for t in c], chunks)
        for chunk, oks in zip(chunks, results, strict=True):
            for tx, ok in zip(chunk, oks, strict=True):
                if ok:
                    self._remember(tx)


def _signature_ok(tx: Tx) -> bool:
    msg = sign_bytes(tx.chain_id, tx.body_bytes, tx.auth_info_bytes)
    try:
        VerifyKey(tx.public_key).verify(msg, tx.signature)
    except (BadSignatureError, CryptoError, ValueError, TypeError):
        return False
    return True


def build_tx(
    private_key: Ed25519Signer,
    *,
    chain_id: str,
    msgs: list[tx_pb2.Msg],
    sequence: int,
    fee: int = 0,
    memo: str = "",
    timeout_height: int = 0,
) -> bytes:
    """Sign and encode a tx (client side)."""
    body = tx_pb2.TxBody(messages=msgs, memo=memo, timeout_height=timeout_height)
    body_bytes = body.SerializeToString(deterministic=True)
    return sign_body(private_key, body_bytes, chain_id=chain_id, sequence=sequence, fee=fee)


def sign_body(
    private_key: Ed25519Signer, body_bytes: bytes, *, chain_id: str, sequence: int, fee: int
) -> bytes:
    """TxRaw bytes of an encoded TxBody signed by ``private_key``: the one signing path of every
    client (``build_tx``, the CLI's ``tx`` commands, ``tx sign`` of a generated document)."""
    auth = tx_pb2.AuthInfo(
        public_key=private_key.public_bytes(), sequence=sequence, fee=fee, chain_id=chain_id
    )
    auth_bytes = auth.SerializeToString(deterministic=True)
    sig = private_key.sign(sign_bytes(chain_id, body_bytes, auth_bytes))
    return tx_pb2.TxRaw(
        body_bytes=body_bytes, auth_info_bytes=auth_bytes, signature=sig
    ).SerializeToString(deterministic=True)


class Ed25519Signer:
    """A private key that can sign (cryptography's Ed25519PrivateKey behind a small API)."""

    def __init__(self, seed: bytes) -> None:
        # lazy: every CLI command loads this module (--help too) and only signing needs
        # cryptography's key classes (about 7 ms of the CLI's start)
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

        if len(seed) != 32:
            raise ValueError("ed25519 seed must be 32 bytes")
        self._key = Ed25519PrivateKey.from_private_bytes(seed)
        self.seed = seed

    @classmethod
    def generate(cls) -> Ed25519Signer:
        return cls(os.urandom(32))

    def public_bytes(self) -> bytes:
        return self._key.public_key().public_bytes_raw()

    def sign(self, data: bytes) -> bytes:
        return self._key.sign(data)

    @property
    def address(self) -> bytes:
        return address_from_pubkey(self.public_bytes())
