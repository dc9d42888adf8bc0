"""The stream transition table (docs/adb.md, "Streams")."""

from __future__ import annotations

import pytest

from devyard.hostd.adb import LocalProtocolError, RemoteProtocolError
from devyard.hostd.adb.state import StreamEvent as E
from devyard.hostd.adb.state import StreamState as S
from devyard.hostd.adb.state import transition


def _run(state: S, *events: E) -> S:
    for event in events:
        state = transition(state, event)
    return state


def test_host_opened_stream_with_crossing_writes() -> None:
    state = _run(S.ACCEPTING, E.SEND_OKAY, E.SEND_WRTE, E.RECV_WRTE)
    assert state is S.WRITING_ACKING
    assert _run(state, E.RECV_OKAY, E.SEND_OKAY) is S.IDLE
    assert _run(state, E.SEND_OKAY, E.RECV_OKAY) is S.IDLE


def test_one_write_in_flight_each_way() -> None:
    with pytest.raises(LocalProtocolError):
        _run(S.IDLE, E.SEND_WRTE, E.SEND_WRTE)
    with pytest.raises(RemoteProtocolError):
        _run(S.IDLE, E.RECV_WRTE, E.RECV_WRTE)
    with pytest.raises(RemoteProtocolError):
        _run(S.IDLE, E.RECV_OKAY)  # an OKAY for nothing we sent


def test_opening_and_abandoning() -> None:
    assert _run(S.OPENING, E.RECV_OKAY) is S.IDLE
    assert _run(S.OPENING, E.RECV_CLSE) is S.CLOSED  # refused
    assert _run(S.OPENING, E.SEND_CLSE, E.RECV_OKAY) is S.CLOSED
    with pytest.raises(RemoteProtocolError):
        _run(S.OPENING, E.RECV_WRTE)


def test_nothing_after_closed() -> None:
    for event in E:
        with pytest.raises((LocalProtocolError, RemoteProtocolError)):
            transition(S.CLOSED, event)


def test_refuse_or_accept_only_once() -> None:
    assert _run(S.ACCEPTING, E.SEND_CLSE) is S.CLOSED
    with pytest.raises(LocalProtocolError):
        _run(S.ACCEPTING, E.SEND_WRTE)
