"""Bearer tokens for the HTTP transport: each names a principal and the projects it may use.

The secret is shown once when the token is made; the store keeps only its SHA-256. A secret is
256 random bits, so a plain hash is enough: there is nothing to guess and no need for a slow one.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import datetime, timezone

from agentmemrec.indexing.errors import InputError
from agentmemrec.indexing.store.protocol import Principal, Store
from agentmemrec.indexing.units import check_project

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
SECRET_PREFIX = "amr_"
__all__ = ["Principal", "add_token", "hash_secret", "list_tokens", "new_secret", "principal_for", "revoke_token"]


def new_secret() -> str:
    return SECRET_PREFIX + secrets.token_urlsafe(32)


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def check_name(name: str) -> str:
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InputError(f"invalid token name {name!r}: use 1-64 characters from letters, digits, "
                         "'.', '_', '@' and '-', starting with a letter or digit")
    return name


def add_token(store: Store, name: str, secret_sha256: str, projects: list[str]) -> Principal:
    """Record a new token; a name is used once (revoke it first to replace it)."""
    check_name(name)
    projects = list(dict.fromkeys(check_project(p) for p in projects))
    if not projects:
        raise InputError("a token needs at least one project: --projects A,B")
    at = datetime.now(timezone.utc).replace(tzinfo=None)
    if not store.add_token(name, secret_sha256, projects, at):
        raise InputError(f"a token named {name!r} exists; revoke it first or pick another name")
    return Principal(name, tuple(projects), at)


def list_tokens(store: Store) -> list[Principal]:
    return store.tokens()


def revoke_token(store: Store, name: str) -> None:
    check_name(name)
    if not store.revoke_token(name):
        raise InputError(f"no token named {name!r}; `agentmemrec tokens list` shows them")


def principal_for(store: Store, secret_sha256: str) -> Principal | None:
    return store.token(secret_sha256)
