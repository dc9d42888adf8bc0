"""deploy/grafana/devyard-dashboard.json against the metrics the code exposes: every series a
panel queries is one the server, a host daemon or a connector renders, and every metric family
they render is on some panel (a renamed metric fails here, not on an operator's screen)."""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from devyard.connector.metrics import Metrics
from devyard.connector.metrics import render as render_connector
from devyard.hostd.metrics import render as render_host
from devyard.server import metrics as server_metrics
from devyard.server.cluster import election as _election  # noqa: F401  (connector locks)
from devyard.server.cluster import metrics as _cluster_metrics  # noqa: F401  (registers its families)
from devyard.server.edge import forward_metrics as _forward_metrics  # noqa: F401  (the same)

DASHBOARD = Path(__file__).parents[2] / "deploy" / "grafana" / "devyard-dashboard.json"
_SUFFIXES = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count"), "info": ("_info",)}


class _NothingRunning:
    def running(self) -> list[str]:
        return []


def _exposed() -> dict[str, str]:
    """Family name -> type, from the three real renderers (process_* families left out)."""
    texts = [
        (generate_latest(server_metrics.REGISTRY) + server_metrics._families(Counter(), None)),
        render_host(_NothingRunning(), capacity=2),
        render_connector(Metrics()).encode(),
    ]
    families: dict[str, str] = {}
    for text in texts:
        for family in text_string_to_metric_families(text.decode()):
            # a counter's *_created sample parses as a family of its own: not a metric to chart
            if family.name.startswith("devyard_") and not family.name.endswith("_created"):
                families[family.name] = family.type
    return families


def _series(name: str, kind: str) -> set[str]:
    """The sample names a family of this type is queried by."""
    if kind == "info":
        return {name + "_info"}
    return {name, *(name + suffix for suffix in _SUFFIXES.get(kind, ()))}


def _queried(dashboard: dict[str, Any]) -> set[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    return {name for expr in exprs for name in re.findall(r"\bdevyard_[a-z_]+\b", expr)}


def test_every_queried_series_exists_and_every_family_is_shown() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    families = _exposed()
    series_of = {name: _series(name, kind) for name, kind in families.items()}
    series = set().union(*series_of.values())
    queried = _queried(dashboard)
    assert queried, "the dashboard queries nothing"
    assert queried <= series, f"not exposed by the code: {sorted(queried - series)}"
    shown = {name for name, own in series_of.items() if own & queried}
    assert shown == set(families), f"on no panel: {sorted(set(families) - shown)}"
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids)) and dashboard["uid"] == "devyard-overview"
