"""API keys: ``tml-`` + a 16-hex key id + a 48-hex secret; the store keeps only a salted hash of the secret.

The prefix is the Tinker SDK's (it refuses keys without it), so one key serves the training-jobs API and the
Tinker-compatible API. The secret is 192 random bits, so a salted SHA-256 HMAC is enough (a slow password hash
protects guessable secrets; these are not guessable) and costs microseconds per request. Verification looks the
key id up and compares digests in constant time.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass

PREFIX = "tml-"
KEY_PATTERN = re.compile(r"^tml-([0-9a-f]{16})([0-9a-f]{48})$")


@dataclass(frozen=True)
class NewKey:
    """A key as created: the full key (shown once), and what the store keeps."""

    key: str
    key_id: str
    salt: bytes
    digest: bytes


def digest(salt: bytes, secret: str) -> bytes:
    """HMAC-SHA256 of the secret under the key's salt."""
    return hmac.new(salt, secret.encode("ascii"), hashlib.sha256).digest()


def new_key() -> NewKey:
    """A fresh random key."""
    key_id, secret, salt = secrets.token_hex(8), secrets.token_hex(24), secrets.token_bytes(16)
    return NewKey(PREFIX + key_id + secret, key_id, salt, digest(salt, secret))


def split_key(key: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed key, else None."""
    match = KEY_PATTERN.match(key)
    return None if match is None else (match.group(1), match.group(2))


def matches(salt: bytes, stored: bytes, secret: str) -> bool:
    """Whether ``secret`` hashes to ``stored`` (constant time)."""
    return hmac.compare_digest(digest(salt, secret), stored)
