"""A page's menu entry (``NAV`` of a page module, docs/console.md "Adding a page")."""

from __future__ import annotations

import attrs

__all__ = ["NavEntry"]


@attrs.frozen
class NavEntry:
    label: str
    path: str  # the page's URL, and the prefix that marks the entry current
    least_role: str = "viewer"  # shown to this role and above (the API still decides)

    def shown_to(self, role: str) -> bool:
        rank = {"viewer": 0, "member": 1, "admin": 2}
        return rank.get(role, 0) >= rank.get(self.least_role, 0)
