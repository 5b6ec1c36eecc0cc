"""Accounts: the public key (learnt from the first signed tx) and the next sequence."""

from __future__ import annotations

from abci_app.auth.keys import account_key
from abci_app.encoding import decode_msg, encode_msg
from abci_app.errors import ErrInvalidPubKey, ErrWrongSequence
from abci_app.pb import state_pb2
from abci_app.store import CacheKV, KVReader


def get_account(store: KVReader, address: bytes) -> state_pb2.Account:
    raw = store.get(account_key(address))
    return state_pb2.Account() if raw is None else decode_msg(state_pb2.Account, raw)


def process_sequence(store: CacheKV, address: bytes, public_key: bytes, sequence: int) -> None:
    """Precondition: address == sha256(public_key)[:20] (checked by the codec).
    Rejects a replay or a gap, then advances the account's sequence by one."""
    acc = get_account(store, address)
    if acc.public_key and acc.public_key != public_key:
        raise ErrInvalidPubKey("public key does not match the account's key")
    if sequence != acc.sequence:
        raise ErrWrongSequence(
            f"account sequence mismatch: expected {acc.sequence}, got {sequence} "
            "(a replayed or out-of-order tx; query the account for its sequence)"
        )
    acc.public_key = public_key
    acc.sequence = sequence + 1
    store.set(account_key(address), encode_msg(acc))
