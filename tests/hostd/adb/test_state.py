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


def test_one_write_of_ours_in_flight() -> None:
    with pytest.raises(LocalProtocolError):
        _run(S.IDLE, E.SEND_WRTE, E.SEND_WRTE)
    with pytest.raises(RemoteProtocolError):
        _run(S.IDLE, E.RECV_OKAY)  # an OKAY for nothing we sent


def test_host_writes_may_queue_behind_an_unacked_one() -> None:
    # a bridge that acknowledges early sends more than one (core/adbwire.py); the stream
    # counts them itself and leaves ACKING with the last OKAY
    assert _run(S.IDLE, E.RECV_WRTE, E.RECV_WRTE) is S.ACKING
    assert _run(S.WRITING, E.RECV_WRTE, E.RECV_WRTE) is S.WRITING_ACKING


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
