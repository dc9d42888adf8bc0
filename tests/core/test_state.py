"""The stream state table (docs/protocol.md section 3)."""

from __future__ import annotations

import pytest

from devyard.core import LocalProtocolError, RemoteProtocolError
from devyard.core.state import StreamEvent as E
from devyard.core.state import StreamState as S
from devyard.core.state import transition


@pytest.mark.parametrize(
    ("path", "end"),
    [
        ([E.SEND_FIN, E.RECV_FIN], S.CLOSED),
        ([E.RECV_FIN, E.SEND_DATA, E.SEND_FIN], S.CLOSED),
        ([E.RECV_DATA, E.SEND_FIN, E.RECV_DATA, E.RECV_FIN], S.CLOSED),
        ([E.SEND_FIN, E.RECV_RST], S.RESET),
        ([E.RECV_FIN, E.SEND_RST], S.RESET),
        ([E.SEND_FIN, E.RECV_FIN, E.RECV_RST], S.CLOSED),
        ([E.SEND_RST, E.RECV_RST], S.RESET),
    ],
)
def test_legal_paths(path: list[E], end: S) -> None:
    state = S.OPEN
    for event in path:
        state = transition(state, event)
    assert state is end


def test_peer_data_after_its_fin_is_a_remote_error() -> None:
    with pytest.raises(RemoteProtocolError, match="recv-data"):
        transition(S.REMOTE_CLOSED, E.RECV_DATA)
    with pytest.raises(RemoteProtocolError):
        transition(S.CLOSED, E.RECV_FIN)


def test_our_data_after_our_fin_is_a_local_error() -> None:
    with pytest.raises(LocalProtocolError, match="send-data"):
        transition(S.LOCAL_CLOSED, E.SEND_DATA)
    with pytest.raises(LocalProtocolError):
        transition(S.CLOSED, E.SEND_FIN)
