"""The console's pages: one module each, listed in ``PAGES`` (docs/console.md, "Adding a
page"). A page module has ``blueprint`` (its routes, under ``/console/<page>``) and ``NAV``
(its menu entry, a `nav.NavEntry`, or None for a page outside the menu such as sign-in)."""

from __future__ import annotations

from types import ModuleType

from ..nav import NavEntry
from . import (
    assets,
    billing,
    builds,
    instance,
    instances,
    join,
    operators,
    signin,
    team,
    tunnels,
    usage,
)

__all__ = ["PAGES", "nav_entries"]

#: Every page module, in menu order.
PAGES: tuple[ModuleType, ...] = (
    signin,
    instances,
    instance,
    builds,
    tunnels,
    assets,
    usage,
    team,
    join,
    billing,
    operators,
)


def nav_entries() -> tuple[NavEntry, ...]:
    return tuple(module.NAV for module in PAGES if module.NAV is not None)
