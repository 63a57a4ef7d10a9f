"""Panel sessions: signing in with an API key gives a session cookie; the store keeps only its sha256.

The cookie (:data:`SESSION_COOKIE`) holds 256 random bits; the ``panel_sessions`` table (migration ``panel-1``)
keeps their sha256, the workspace and key they stand for, the session's CSRF token and when it expires. A
session is only as good as its key: a revoked key ends every session signed in with it. Worker tokens cannot
sign in (they are for ``blobkit worker``). Before sign-in, the form's CSRF token is a double-submit value: the
same random value in a SameSite=Strict cookie (:data:`SIGNIN_COOKIE`) and in the form.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time

from blobkit.errors import ForbiddenError

from ..migrations import Migration, register
from ..records import Principal, Record
from ..store import ServiceStore

SESSION_COOKIE = "blobkit_session"
"""The session cookie: HttpOnly, SameSite=Strict, Path=/ (Secure when served over https)."""
SIGNIN_COOKIE = "blobkit_signin"
"""The sign-in form's double-submit CSRF cookie."""
SESSION_S = 12 * 3600
"""How long a session lasts (12 hours)."""

MIGRATION = register(Migration("panel-1", (
    """CREATE TABLE panel_sessions (
        digest TEXT PRIMARY KEY,
        workspace TEXT NOT NULL REFERENCES workspaces(name),
        key_id TEXT NOT NULL REFERENCES api_keys(id),
        csrf TEXT NOT NULL,
        created_at REAL NOT NULL,
        expires_at REAL NOT NULL
    )""",
    "CREATE INDEX panel_sessions_expiry ON panel_sessions (expires_at)",
)))
"""The sessions table: the sha256 of each session token, never the token."""


class Session(Record):
    """A signed-in browser: who it is and the CSRF token its forms carry."""

    principal: Principal
    """The workspace and key the session stands for."""
    csrf: str
    """The token every form (and every script's POST, as ``X-CSRF-Token``) of this session must carry."""
    expires_at: float
    """Unix time the session ends."""


class SignedOut(Exception):
    """The request has no valid session (the page asks to sign in)."""


def token_digest(token: str) -> str:
    """What the store keeps of a session token: its sha256 (the token is 256 random bits, so no salt is needed)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def sign_in(store: ServiceStore, key: str) -> tuple[str, Session]:
    """A new session for ``key``: (the cookie's token, the session). AuthError for a bad key; ForbiddenError for a
    worker token."""
    principal = store.resolve_key(key.strip())
    if principal.role != "user":
        raise ForbiddenError("this is a worker token (it is for blobkit worker --token); sign in with a workspace "
                             "key from blobkit serve keys create --store DIR --workspace NAME")
    token, csrf, now = secrets.token_urlsafe(32), secrets.token_urlsafe(32), time.time()
    with store.write() as conn:
        conn.execute("DELETE FROM panel_sessions WHERE expires_at < ?", (now,))
        conn.execute("INSERT INTO panel_sessions (digest, workspace, key_id, csrf, created_at, expires_at) "
                     "VALUES (?, ?, ?, ?, ?, ?)",
                     (token_digest(token), principal.workspace, principal.key_id, csrf, now, now + SESSION_S))
    return token, Session(principal=principal, csrf=csrf, expires_at=now + SESSION_S)


def session_of(store: ServiceStore, token: str | None) -> Session:
    """The live session of a cookie token; SignedOut when there is none, it expired, or its key was revoked."""
    if not token:
        raise SignedOut("no session")
    row = store.conn.execute(
        "SELECT s.workspace, s.key_id, s.csrf, s.expires_at, k.role FROM panel_sessions s JOIN api_keys k "
        "ON k.id = s.key_id WHERE s.digest = ? AND s.expires_at > ? AND k.revoked_at IS NULL",
        (token_digest(token), time.time())).fetchone()
    if row is None:
        raise SignedOut("the session ended")
    principal = Principal(workspace=row[0], key_id=row[1], role=row[4])
    return Session(principal=principal, csrf=row[2], expires_at=row[3])


def sign_out(store: ServiceStore, token: str | None) -> None:
    """End the session of ``token`` (nothing happens without one)."""
    if token:
        with store.write() as conn:
            conn.execute("DELETE FROM panel_sessions WHERE digest = ?", (token_digest(token),))


def same_token(expected: str | None, given: str | None) -> bool:
    """Whether a CSRF token matches (constant time; a missing one never does)."""
    return bool(expected) and bool(given) and hmac.compare_digest(str(expected), str(given))
