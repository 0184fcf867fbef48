"""Encrypted job data: the key file, and the envelope a sealed input, output, error, log or
checkpoint is stored as (AES-256-GCM, bound to the job and the field, so that a ciphertext
moved to another job or field does not open). The same bytes as the Rust client's
(crates/proto/src/crypto.rs; `crypto_vectors` there fixes them, and this package's tests
check the same vector).

The key file holds one key a line, `ID BASE64(32 bytes)` (`#` starts a comment): the first
key seals new data, every key opens. An envelope is `MAGIC | id length (1 byte) | id |
nonce (12 bytes) | ciphertext | tag (16 bytes)`, with the associated data
`wasmgear-v1|FUNCTION:NUMBER|FIELD`; in a text field (an error message, a log line) it is
written TEXT_PREFIX then its base64.

    keys = KeyRing.load("keys")
    sealed = keys.seal("invoice:7", "input", b'{"card": "4111 1111 1111 1111"}')
    keys.open("invoice:7", "input", sealed)
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from typing import List, Optional, Sequence, Tuple, Union

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from ._core.base import quoted
from .errors import EncryptionError

#: What every envelope starts with: a zero byte (no text starts so) and a version.
MAGIC = b"\0wgenc1"
#: What an envelope in a text field starts with, before its base64.
TEXT_PREFIX = "wgenc1:"
#: The parts of a job an envelope may hold, as named in its associated data.
FIELDS = ("input", "output", "error", "log", "checkpoint")
#: The longest key id, in bytes.
MAX_KEY_ID_LEN = 32

NONCE_LEN = 12
TAG_LEN = 16
KEY_LEN = 32
#: The most bytes an envelope holds before its ciphertext (magic, key id, nonce): reading
#: that much of stored data tells whether it is sealed, and how large it is opened.
MAX_HEADER = len(MAGIC) + 1 + MAX_KEY_ID_LEN + NONCE_LEN

_ID_RE = re.compile(r"[A-Za-z0-9_.\-]{1,%d}\Z" % MAX_KEY_ID_LEN)


def _check_id(key_id: str) -> Optional[str]:
    """Why `key_id` cannot be a key's id, or None when it can."""
    if not _ID_RE.match(key_id):
        return f"key id {quoted(key_id)} must be 1 to {MAX_KEY_ID_LEN} of [A-Za-z0-9_.-]"
    return None


def _associated(job: str, field: str) -> bytes:
    """What an envelope is bound to: the job (`FUNCTION:NUMBER`) and the field."""
    if field not in FIELDS:
        raise ValueError(f"{field!r} is not one of {', '.join(FIELDS)}")
    return f"wasmgear-v1|{job}|{field}".encode()


def _lines(text: str) -> List[str]:
    """`text`'s lines as Rust's `str::lines` cuts them (at `\\n`, a `\\r` before it dropped),
    so that the line numbers in errors are the Rust client's."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def _b64decode(text: str) -> bytes:
    """`text` as standard base64 with its padding, only in its canonical form (what the Rust
    client's decoder takes); binascii.Error otherwise."""
    data = base64.b64decode(text, validate=True)
    if base64.b64encode(data).decode("ascii") != text:
        raise binascii.Error("it is not in canonical form (padding or trailing bits)")
    return data


class KeyRing:
    """The keys of a key file: the first seals, every one opens. Its repr names the key ids,
    never the keys."""

    def __init__(self, keys: Sequence[Tuple[str, bytes]]) -> None:
        """A ring of (id, 32-byte key) pairs, the first the one that seals; ValueError for
        none, a bad id, an id given twice or a key that is not 32 bytes."""
        if not keys:
            raise ValueError("a key ring needs at least one key")
        seen: List[str] = []
        self._keys: List[Tuple[str, AESGCM]] = []
        for key_id, key in keys:
            problem = _check_id(key_id) or (
                f"key id {quoted(key_id)} is used twice" if key_id in seen else None)
            if problem is None and len(key) != KEY_LEN:
                problem = f"the key is {len(key)} bytes, not {KEY_LEN}"
            if problem is not None:
                raise ValueError(problem)
            seen.append(key_id)
            self._keys.append((key_id, AESGCM(bytes(key))))

    @classmethod
    def parse(cls, path: str, text: str) -> "KeyRing":
        """The keys of a key file's `text` (`path` names it in errors): EncryptionError
        naming the file and the line of the first thing wrong."""
        def bad(line: int, reason: str) -> EncryptionError:
            return EncryptionError(f"the encryption key file {path}: line {line}: {reason}")

        keys: List[Tuple[str, bytes]] = []
        for n, line in enumerate(_lines(text), start=1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            if len(words) != 2:
                raise bad(n, "expected `ID BASE64KEY`")
            key_id, encoded = words
            problem = _check_id(key_id)
            if problem is not None:
                raise bad(n, problem)
            if any(other == key_id for other, _ in keys):
                raise bad(n, f"key id {quoted(key_id)} is used twice")
            try:
                key = _b64decode(encoded)
            except (binascii.Error, ValueError) as e:
                raise bad(n, f"the key is not base64: {e}") from None
            if len(key) != KEY_LEN:
                raise bad(n, f"the key is {len(key)} bytes, not {KEY_LEN}")
            keys.append((key_id, key))
        if not keys:
            raise EncryptionError(f"the encryption key file {path}: it holds no key (add one "
                                  "with `wasmgear keys new FILE ID`)")
        return cls(keys)

    @classmethod
    def load(cls, path: Union[str, "os.PathLike[str]"]) -> "KeyRing":
        """The keys of the key file at `path`: EncryptionError when it cannot be read, or
        does not read as one (see `parse`)."""
        shown = os.fspath(path)
        try:
            with open(path, encoding="utf-8") as file:
                text = file.read()
        except (OSError, UnicodeDecodeError) as e:
            raise EncryptionError(f"cannot read the encryption key file {shown}: {e}") from None
        return cls.parse(shown, text)

    @staticmethod
    def new_key_line(key_id: str) -> str:
        """A new random key's line for a key file: `ID BASE64`."""
        problem = _check_id(key_id)
        if problem is not None:
            raise EncryptionError(f"the encryption key file : {problem}")
        return f"{key_id} {base64.b64encode(os.urandom(KEY_LEN)).decode('ascii')}"

    @property
    def current(self) -> str:
        """The id of the key that seals new data."""
        return self._keys[0][0]

    @property
    def ids(self) -> List[str]:
        """Every key's id, the current one first."""
        return [key_id for key_id, _ in self._keys]

    def __repr__(self) -> str:
        return f"KeyRing({self.ids!r})"

    def seal(self, job: str, field: str, plaintext: bytes) -> bytes:
        """`plaintext` sealed for `field` of job `job` (`FUNCTION:NUMBER`) with the current
        key and a random nonce."""
        return self._seal_with_nonce(job, field, plaintext, os.urandom(NONCE_LEN))

    def _seal_with_nonce(self, job: str, field: str, plaintext: bytes, nonce: bytes) -> bytes:
        key_id, key = self._keys[0]
        header = MAGIC + bytes([len(key_id)]) + key_id.encode("ascii") + nonce
        return header + key.encrypt(nonce, bytes(plaintext), _associated(job, field))

    def open(self, job: str, field: str, data: bytes) -> bytes:
        """`data` opened as `field` of job `job` if it is an envelope, else `data` as it is.
        EncryptionError when it was sealed with a key this ring lacks, was changed or moved
        from another job or field, or is cut short."""
        associated = _associated(job, field)
        try:
            parts = _envelope(data)
        except ValueError:
            raise _malformed(job, field) from None
        if parts is None:
            return data
        key_id, nonce, body = parts
        key = next((k for other, k in self._keys if other == key_id), None)
        if key is None:
            raise EncryptionError(f"encrypted with key {quoted(key_id)}, which is not in this "
                                  "key file (add it to read the data)")
        try:
            return key.decrypt(nonce, body, associated)
        except InvalidTag:
            raise EncryptionError(
                f"encrypted data of {job} ({field}) does not open with key {quoted(key_id)}: "
                "it was changed, or belongs to another job") from None

    def seal_text(self, job: str, field: str, text: str) -> str:
        """`text` sealed for a text field: TEXT_PREFIX and the envelope's base64."""
        sealed = self.seal(job, field, text.encode("utf-8"))
        return TEXT_PREFIX + base64.b64encode(sealed).decode("ascii")

    def open_text(self, job: str, field: str, text: str) -> str:
        """A text field opened if it is sealed (its bytes read as UTF-8, anything else
        replaced), else as it is."""
        if not text.startswith(TEXT_PREFIX):
            return text
        try:
            sealed = _b64decode(text[len(TEXT_PREFIX):].strip())
        except (binascii.Error, ValueError):
            raise _malformed(job, field) from None
        return self.open(job, field, sealed).decode("utf-8", "replace")


def is_sealed(data: Union[bytes, str]) -> bool:
    """Whether `data` is an envelope (binary, or in a text field)."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    return raw.startswith(MAGIC) or raw.startswith(TEXT_PREFIX.encode())


def sealed_with(data: Union[bytes, str]) -> Optional[str]:
    """The id of the key that sealed `data` (binary, or in a text field), or None when it
    is not an envelope."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if raw.startswith(TEXT_PREFIX.encode()):
        try:
            raw = base64.b64decode(raw[len(TEXT_PREFIX):], validate=True)
        except (binascii.Error, ValueError):
            return None
    try:
        parts = _envelope(raw)
    except ValueError:
        return None
    return None if parts is None else parts[0]


def overhead(head: bytes) -> Optional[int]:
    """How many bytes of binary data starting with `head` are the envelope's own (magic, key
    id, nonce, tag), None when it is not sealed: the data opened is that much smaller."""
    if not head.startswith(MAGIC) or len(head) <= len(MAGIC):
        return None
    return len(MAGIC) + 1 + head[len(MAGIC)] + NONCE_LEN + TAG_LEN


def no_keys_here(data: Union[bytes, str]) -> str:
    """What a reader without keys is told of sealed `data` (the Rust client's
    `CryptoError::NoKeys`), naming the key that sealed it (`?` when that does not read)."""
    key_id = sealed_with(data)
    return (f"encrypted (key {quoted('?' if key_id is None else key_id)}); no key here (give "
            "the key file: WASMGEAR_ENCRYPTION_KEY_FILE)")


def _envelope(data: bytes) -> Optional[Tuple[str, bytes, bytes]]:
    """The parts of envelope `data` (key id, nonce, ciphertext and tag), None when it is not
    an envelope; ValueError when it starts as one but is cut short or garbled."""
    if not data.startswith(MAGIC):
        return None
    rest = data[len(MAGIC):]
    if not rest:
        raise ValueError("no key id")
    id_len, rest = rest[0], rest[1:]
    if len(rest) < id_len + NONCE_LEN + TAG_LEN:
        raise ValueError("cut short")
    key_id = rest[:id_len].decode("utf-8")  # a UnicodeDecodeError is a ValueError
    return key_id, rest[id_len:id_len + NONCE_LEN], rest[id_len + NONCE_LEN:]


def _malformed(job: str, field: str) -> EncryptionError:
    return EncryptionError(f"encrypted data of {job} ({field}) is cut short or garbled")


__all__ = ["FIELDS", "MAGIC", "MAX_HEADER", "TEXT_PREFIX", "KeyRing", "is_sealed", "no_keys_here",
           "overhead", "sealed_with"]
