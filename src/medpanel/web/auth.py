"""Who is asking: the admin token given to `medpanel serve`, or a person's token from `medpanel users add`.

A token arrives as `Authorization: Bearer TOKEN`, the `medpanel_token` cookie (set by the sign-in form), or
once as `?token=` in a link (then moved to the cookie). Only hashes of people's tokens are stored. On a
loopback bind with no token set, the one person at this machine is the local admin.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass

from medpanel.errors import UsageError

COOKIE = "medpanel_token"
ROLES = ("clinician", "rater", "admin")
OPEN_PATHS = ("/health", "/login")  # reachable without a token: the health check, and the form to give one


class Forbidden(UsageError):
    """Signed in, but this person's role may not do that (a 403 page)."""

    http_status = 403


RESERVED_NAMES = ("admin", "local")  # the admin token's and the loopback person's names: no user may take them


@dataclass(frozen=True)
class User:
    name: str
    role: str  # clinician | rater | admin

    @property
    def is_admin(self) -> bool:
        return self.role == "admin"


LOCAL_ADMIN = User("local", "admin")


def token_hash(token: str) -> str:
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


def new_token() -> str:
    return secrets.token_urlsafe(24)


def user_for(token: str | None, admin_token: str | None, store) -> User | None:
    """The user this token belongs to, or None."""
    if not token:
        return None
    if admin_token and hmac.compare_digest(token.encode(), admin_token.encode()):
        return User("admin", "admin")
    row = store.user_by_token_hash(token_hash(token))
    return User(row["name"], row["role"]) if row else None


def token_of(headers, cookies, query) -> str | None:
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return cookies.get(COOKIE) or query.get("token")


def check_user_name(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 64 or not all(c.isalnum() or c in "._-@ " for c in name):
        raise UsageError(f"'{name}' is not a usable user name.", "Use up to 64 letters, digits, spaces and . _ - @.")
    if name.lower() in RESERVED_NAMES:
        raise UsageError(f"'{name}' is reserved (it names the admin token or the person at a loopback server).", "Choose another name.")
    return name


def check_role(role: str) -> str:
    if role not in ROLES:
        raise UsageError(f"Unknown role '{role}'.", f"Use one of: {', '.join(ROLES)}.")
    return role
