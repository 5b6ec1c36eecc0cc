"""A file keyring: ``HOME/keyring/NAME.json`` holds an ed25519 seed, written with mode 0600.

Keys are stored unencrypted (like ``--keyring-backend test`` in the Cosmos SDK): this is a
development keyring for local nodes and testnets, and the README says so.

Mnemonics (``loconet keys add`` prints one; ``keys add --recover`` takes one): a BIP-39 English
mnemonic of 24 words (256 bits of entropy; 12..24 words accepted on recovery) is turned into a
64-byte seed by BIP-39 (PBKDF2-HMAC-SHA512, 2048 rounds, salt "mnemonic" + passphrase; the
``mnemonic`` package), and the ed25519 key is derived from that seed by SLIP-0010 along the
all-hardened path ``m/44'/118'/0'/0'/0'`` (``HD_PATH``; ed25519 has no public derivation, so
every level is hardened). The 32-byte SLIP-0010 private key is the ed25519 seed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
import re
import stat
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import ChaCha20Poly1305
from cryptography.hazmat.primitives.kdf.scrypt import Scrypt
from mnemonic import Mnemonic

from abci_app.codec.address import to_bech32
from abci_app.codec.tx import Ed25519Signer
from node.atomic import write_new_atomic

NAME_RE = re.compile(r"^[A-Za-z0-9_.\-]{1,64}\Z")  # \Z, not $: "bob\n" is not a name
HD_PATH = "m/44'/118'/0'/0'/0'"
_HARDENED = 0x8000_0000


def slip10_ed25519(seed: bytes, path: str = HD_PATH) -> bytes:
    """SLIP-0010 ed25519 private key (32 bytes) of ``seed`` at an all-hardened ``path``."""
    digest = hmac.new(b"ed25519 seed", seed, hashlib.sha512).digest()
    key, chain = digest[:32], digest[32:]
    parts = path.split("/")
    if parts[0] != "m":
        raise KeyError_(f"bad derivation path {path!r}: it starts with m/")
    for part in parts[1:]:
        if not part.endswith("'") or not part[:-1].isdigit():
            raise KeyError_(f"bad derivation path {path!r}: ed25519 needs hardened levels (44')")
        index = int(part[:-1]) + _HARDENED
        digest = hmac.new(chain, b"\x00" + key + index.to_bytes(4, "big"), hashlib.sha512).digest()
        key, chain = digest[:32], digest[32:]
    return key


def new_mnemonic() -> str:
    """24 BIP-39 English words (256 bits from the OS's CSPRNG)."""

    return str(Mnemonic("english").generate(strength=256))


def seed_from_mnemonic(words: str, passphrase: str = "") -> bytes:
    """The ed25519 seed of a BIP-39 mnemonic (module docstring); KeyError_ if the words or their
    checksum are wrong."""

    m = Mnemonic("english")
    norm = " ".join(words.strip().lower().split())
    n = len(norm.split())
    if n not in (12, 15, 18, 21, 24):
        raise KeyError_(f"a BIP-39 mnemonic has 12, 15, 18, 21 or 24 words; got {n}")
    unknown = [w for w in norm.split() if w not in m.wordlist]
    if unknown:
        raise KeyError_(f"not BIP-39 English words: {', '.join(unknown[:3])}: check the spelling")
    if not m.check(norm):
        raise KeyError_("the mnemonic's checksum is wrong: a word is missing, extra or swapped")
    return slip10_ed25519(Mnemonic.to_seed(norm, passphrase))


class KeyError_(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Key:
    name: str
    signer: Ed25519Signer

    @property
    def address(self) -> str:
        return to_bech32(self.signer.address)

    @property
    def address_bytes(self) -> bytes:
        return self.signer.address


Scan = list[tuple[str, Key | None, str | None]]  # (name, key or None, why it is unreadable)


MAX_KEY_FILE = 64 << 10  # a key file is ~270 bytes


def _read_key_file(path: Path) -> str:
    """The text of a key file: a regular file of at most ``MAX_KEY_FILE`` bytes. A FIFO named
    like a key blocked ``keys show`` for ever (open() waits for a writer), a link to /dev/zero
    or a 1 GB NAME.json was read whole (a MemoryError traceback): ValueError (corrupt) instead."""

    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ValueError("it is a folder, not a key file")
        if not stat.S_ISREG(st.st_mode):
            raise ValueError("it is not a regular file")
        data = b""
        while len(data) <= MAX_KEY_FILE:
            piece = os.read(fd, MAX_KEY_FILE + 1 - len(data))
            if not piece:
                break
            data += piece
    finally:
        os.close(fd)
    if len(data) > MAX_KEY_FILE:
        raise ValueError(f"larger than {MAX_KEY_FILE >> 10} KiB; a key file is ~270 bytes")
    return data.decode()


class Keyring:
    def __init__(self, home: Path) -> None:
        self.dir = Path(home) / "keyring"

    def _path(self, name: str) -> Path:
        if not NAME_RE.match(name):
            raise KeyError_(f"invalid key name {name!r}: use letters, digits, '.', '_' or '-'")
        return self.dir / f"{name}.json"

    def add(self, name: str, seed: bytes | None = None) -> Key:
        """Write key ``name`` (a fresh one, or the key of ``seed``). Refused when the name is
        taken, or when the keyring already holds this key under another name: the Cosmos SDK
        keyring refuses that too (``ErrDuplicatedAddress``), and two names for one address let
        two provider workers (locked per key name) sign from one account."""
        path = self._path(name)
        if path.exists():
            raise KeyError_(f"key {name!r} already exists in {self.dir}: pick another name")
        signer = Ed25519Signer(seed) if seed is not None else Ed25519Signer.generate()
        address = to_bech32(signer.address)
        # a fresh key never collides (2^-128): only a given seed (recover, import) is looked up
        for other, key, _ in self.scan() if seed is not None else ():
            if key is not None and key.address == address:
                raise KeyError_(
                    f"this key is already in the keyring as {other!r} ({address}): use --from "
                    f"{other} (one name per address; `loconet keys delete {other}` first to "
                    "rename it)"
                )
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        body = json.dumps(
            {
                "name": name,
                "type": "ed25519",
                "address": to_bech32(signer.address),
                "public_key": signer.public_bytes().hex(),
                "seed": signer.seed.hex(),
            },
            indent=2,
        )
        try:  # complete or absent: a kill -9 mid-write never leaves a half key under NAME.json
            write_new_atomic(path, body + "\n", 0o600)
        except FileExistsError:  # a concurrent `keys add` of the same name won
            raise KeyError_(
                f"key {name!r} already exists in {self.dir}: pick another name"
            ) from None
        return Key(name, signer)

    def delete(self, name: str) -> str:
        """Remove a key file; returns the address it held."""
        key = self.get(name)
        self._path(name).unlink()
        return key.address

    def get(self, name: str) -> Key:
        path = self._path(name)
        if not path.exists():
            if not self.dir.parent.is_dir():  # a typo'd --home: not "add the key" to a new folder
                raise KeyError_(
                    f"{self.dir.parent} does not exist: check --home (or create a node home with "
                    f"`loconet init --home {self.dir.parent}`)"
                )
            known = ", ".join(self.names()) or "none"
            raise KeyError_(
                f"no key named {name!r} in {self.dir} (known: {known}); add it with `loconet keys "
                f"add {name} --home ...`"
            )
        try:
            text = _read_key_file(path)
        except OSError as e:  # unreadable (another user's, mode 000): one entry of keys list
            raise KeyError_(
                f"cannot read key file {path} ({e.strerror or e}): run as the user who owns the "
                "home"
            ) from None
        except ValueError as e:
            raise KeyError_(
                f"key file {path} is corrupt ({e}); move it away (`mv {path} {path}.bad`), then "
                f"restore the key from its mnemonic: `loconet keys add {name} --recover`"
            ) from None
        try:
            return Key(name, Ed25519Signer(bytes.fromhex(json.loads(text)["seed"])))
        except (ValueError, KeyError, TypeError, RecursionError) as e:  # not JSON, no seed, [[[[..
            raise KeyError_(
                f"key file {path} is corrupt ({type(e).__name__}: {e}); move it away (`mv {path} "
                f"{path}.bad`), then restore the key from its mnemonic: `loconet keys add {name} "
                "--recover`"
            ) from None

    def names(self) -> list[str]:
        """The keys: NAME.json files whose NAME is a key name (a stray ``notes 2.json`` or a
        folder is not a key and does not stop ``keys list``)."""
        if not self.dir.is_dir():
            return []
        try:  # not Path.glob: it reads an unreadable folder as empty ("no keys")
            entries = list(os.scandir(self.dir))
        except PermissionError as e:
            raise KeyError_(
                f"cannot read the keyring {self.dir} ({e.strerror}): run as the user who owns "
                "the home"
            ) from None
        return sorted(
            e.name[:-5]
            for e in entries
            if e.name.endswith(".json") and NAME_RE.match(e.name[:-5]) and e.is_file()
        )

    def list(self) -> list[Key]:
        return [self.get(n) for n in self.names()]

    def scan(self) -> Scan:
        """(name, key, None) for every readable key and (name, None, why + fix) for a corrupt
        one: one bad file does not hide the others (``keys list``)."""
        found: Scan = []
        for n in self.names():
            try:
                found.append((n, self.get(n), None))
            except KeyError_ as e:
                found.append((n, None, str(e)))
        return found


# ----------------------------------------------------------------------------- export / import
#
# ``keys export`` writes a key as ASCII armor encrypted with a passphrase, like the Cosmos SDK's
# (which armors a bcrypt + xsalsa20-poly1305 box): here scrypt (RFC 7914) derives a 256-bit key
# from the passphrase and a random salt, and ChaCha20-Poly1305 (RFC 8439) seals the 32-byte
# ed25519 seed, both from the ``cryptography`` package. The header lines are the AEAD's
# associated data: a changed address, salt or parameter fails the tag like a wrong passphrase.
#
#     -----BEGIN LOCONET PRIVATE KEY-----
#     kdf: scrypt
#     kdf-params: n=32768,r=8,p=1
#     salt: <16 bytes, hex>
#     cipher: chacha20-poly1305
#     type: ed25519
#     address: loco1...
#
#     <base64 of the 12-byte nonce followed by the ciphertext and its 16-byte tag>
#     -----END LOCONET PRIVATE KEY-----

ARMOR_BEGIN = "-----BEGIN LOCONET PRIVATE KEY-----"
ARMOR_END = "-----END LOCONET PRIVATE KEY-----"
SCRYPT_N, SCRYPT_R, SCRYPT_P = 1 << 15, 8, 1  # 32 MiB, ~0.1 s: OWASP's scrypt minimum is 2^17/8/1
MAX_SCRYPT_N = 1 << 20  # an imported file may ask more work, up to 1 GiB of memory (n * r * p)
MAX_SCRYPT_MEMORY = 1 << 30
MIN_PASSPHRASE = 8  # the Cosmos SDK's minimum for a keyring passphrase


def _scrypt(passphrase: str, salt: bytes, n: int, r: int, p: int) -> bytes:
    return Scrypt(salt=salt, length=32, n=n, r=r, p=p).derive(passphrase.encode())


def export_armor(key: Key, passphrase: str) -> str:
    """``key`` sealed under ``passphrase`` as the armored text above."""

    if len(passphrase) < MIN_PASSPHRASE:
        raise KeyError_(f"the passphrase must have at least {MIN_PASSPHRASE} characters")
    salt, nonce = os.urandom(16), os.urandom(12)
    header = (
        "kdf: scrypt\n"
        f"kdf-params: n={SCRYPT_N},r={SCRYPT_R},p={SCRYPT_P}\n"
        f"salt: {salt.hex()}\n"
        "cipher: chacha20-poly1305\n"
        "type: ed25519\n"
        f"address: {key.address}\n"
    )
    aead = ChaCha20Poly1305(_scrypt(passphrase, salt, SCRYPT_N, SCRYPT_R, SCRYPT_P))
    body = base64.b64encode(nonce + aead.encrypt(nonce, key.signer.seed, header.encode())).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return f"{ARMOR_BEGIN}\n{header}\n" + "\n".join(lines) + f"\n{ARMOR_END}\n"


def import_armor(text: str, passphrase: str) -> bytes:
    """The ed25519 seed sealed in ``text`` (``export_armor``'s output); KeyError_ naming what
    is wrong: not such a file, a wrong passphrase (or an altered file), unknown parameters."""

    bad = "not a key exported by `loconet keys export`"
    lines = text.strip().splitlines()
    if len(lines) < 4 or lines[0].strip() != ARMOR_BEGIN or lines[-1].strip() != ARMOR_END:
        raise KeyError_(f"{bad} (no {ARMOR_BEGIN} ... {ARMOR_END} block)")
    try:
        blank = lines.index("", 1)
    except ValueError:
        raise KeyError_(f"{bad} (no blank line after the headers)") from None
    header_lines = lines[1:blank]
    headers: dict[str, str] = {}
    for line in header_lines:
        k, sep, v = line.partition(": ")
        if not sep:
            raise KeyError_(f"{bad} (header line {line[:40]!r})")
        headers[k] = v
    want = {"kdf": "scrypt", "cipher": "chacha20-poly1305", "type": "ed25519"}
    for k, v in want.items():
        if headers.get(k) != v:
            raise KeyError_(f"{bad}: {k} is {headers.get(k)!r}, this loconet reads {v!r}")
    m = re.fullmatch(r"n=(\d{1,8}),r=(\d{1,2}),p=(\d{1,2})", headers.get("kdf-params", ""))
    if not m:
        raise KeyError_(f"{bad} (kdf-params {headers.get('kdf-params', '')[:40]!r})")
    n, r, p = (int(x) for x in m.groups())
    # memory is 128 * r * n bytes and the work p times that: n=2^20, r=32, p=16 asked 4 GiB (a
    # MemoryError traceback) and minutes of CPU of whoever imported the file
    if not (
        2 <= n <= MAX_SCRYPT_N
        and n & (n - 1) == 0
        and 1 <= r <= 32
        and 1 <= p <= 16
        and 128 * r * n * p <= MAX_SCRYPT_MEMORY
    ):
        raise KeyError_(
            f"{bad}: scrypt n={n}, r={r}, p={p} is out of the range this reads (at most "
            f"{MAX_SCRYPT_MEMORY >> 30} GiB of work: 128 * n * r * p bytes)"
        )
    try:
        salt = bytes.fromhex(headers.get("salt", ""))
        raw = base64.b64decode("".join(lines[blank + 1 : -1]), validate=True)
    except (ValueError, binascii.Error):
        raise KeyError_(f"{bad} (salt or body is not hex / base64)") from None
    if len(salt) < 16 or len(raw) != 12 + 32 + 16:
        raise KeyError_(f"{bad} (salt or body has the wrong length)")
    aad = "".join(f"{line}\n" for line in header_lines).encode()
    try:
        seed = ChaCha20Poly1305(_scrypt(passphrase, salt, n, r, p)).decrypt(raw[:12], raw[12:], aad)
    except InvalidTag:
        raise KeyError_("wrong passphrase, or the file was altered") from None
    except MemoryError:  # within MAX_SCRYPT_MEMORY, on a machine (or ulimit) with less
        raise KeyError_(
            f"not enough memory for this file's scrypt parameters (n={n}, r={r}, p={p})"
        ) from None
    if to_bech32(Ed25519Signer(seed).address) != headers.get("address"):  # sealed: never
        raise KeyError_(f"{bad}: its key is not the address its header names")
    return seed
