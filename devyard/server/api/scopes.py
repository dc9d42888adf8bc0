"""Scopes of scoped tokens: what they read, and which operations they open. Pure.

A scope reads ``<resource>:<target>:<action>``: ``device:<instance id>:install``,
``device:*:install``, ``asset:<asset id>:read``, ``asset:*:read`` (docs/scoped-tokens.md).
``*`` is every object of that resource in the token's organization.

Operations opt in, in ``openapi.yaml``: ``x-devyard-scope: "device:{id}:install"`` on an
operation says a token holding that scope may call it, with ``{id}`` taken from the request's
path parameter of that name. An operation without ``x-devyard-scope`` is closed to every scoped
token, whatever its scopes, so a new operation is safe by default. A scope opens an operation
when resource and action are equal and the scope's target is ``*`` or the path's id; an
operation whose template has a literal ``*`` target (no path id) needs a ``*`` scope.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Final

import attrs

from ..store.base import Role

__all__ = [
    "MINT_ROLE",
    "WILDCARD",
    "Scope",
    "Template",
    "allows",
    "parse_scope",
    "parse_template",
]

WILDCARD: Final = "*"
# The least role of the minting key's user, per (resource, action): a scope never grants more
# than its minter could do with the key itself.
MINT_ROLE: Final = {
    ("device", "install"): Role.MEMBER,
    ("asset", "read"): Role.VIEWER,
}
_SCOPE_RE: Final = re.compile(r"([a-z]+):([A-Za-z0-9_-]{1,200}|\*):([a-z]+)")
_TEMPLATE_RE: Final = re.compile(r"([a-z]+):(?:\{([A-Za-z][A-Za-z0-9]*)\}|(\*)):([a-z]+)")


@attrs.frozen
class Scope:
    resource: str
    target: str  # an object id, or WILDCARD
    action: str

    def __str__(self) -> str:
        return f"{self.resource}:{self.target}:{self.action}"

    @property
    def least_role(self) -> Role:
        return MINT_ROLE[self.resource, self.action]


@attrs.frozen
class Template:
    """An operation's ``x-devyard-scope``: the target is a path parameter, or WILDCARD."""

    resource: str
    parameter: str | None  # None: the target is WILDCARD
    action: str


def parse_scope(text: str) -> Scope:
    """A scope of the grammar above; ValueError for anything else."""
    match = _SCOPE_RE.fullmatch(text)
    if match is None or (match.group(1), match.group(3)) not in MINT_ROLE:
        raise ValueError(f"unknown scope {text!r}")
    return Scope(resource=match.group(1), target=match.group(2), action=match.group(3))


def parse_template(text: str) -> Template:
    """An ``x-devyard-scope`` value; ValueError for anything else (a start-up error)."""
    match = _TEMPLATE_RE.fullmatch(text)
    if match is None or (match.group(1), match.group(4)) not in MINT_ROLE:
        raise ValueError(f"bad x-devyard-scope {text!r}")
    return Template(resource=match.group(1), parameter=match.group(2), action=match.group(4))


def allows(scopes: Iterable[Scope], template: Template, path_args: Mapping[str, str]) -> bool:
    """Whether any of *scopes* opens an operation declaring *template* for these path args."""
    target = WILDCARD if template.parameter is None else path_args.get(template.parameter)
    if target is None:
        return False
    return any(
        scope.resource == template.resource
        and scope.action == template.action
        and scope.target in (WILDCARD, target)
        for scope in scopes
    )
