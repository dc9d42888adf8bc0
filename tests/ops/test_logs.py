"""Logs as an operator meets them, against `devyard up --log-format json` as a subprocess:
one JSON object per line, an X-Request-Id on every response and in every line the request
caused, and an access log in which no secret from a URL ever appears."""

from __future__ import annotations

import io
import json
import logging
import re
from pathlib import Path
from typing import Any

import httpx
import trio

from devyard._process import REQUEST_ID, JsonFormatter, RequestIdFilter, text_formatter

from ._up import open_up

_SECRET = "dyi_0123456789abcdef_hunter2hunter2hunter2"


async def _websocket_upgrade(url: str, path: str, request_id: str) -> str:
    """The head of the answer to a WebSocket upgrade (no credentials) on *path*."""
    host, port = url.removeprefix("http://").split(":")
    stream = await trio.open_tcp_stream(host, int(port))
    async with stream:
        await stream.send_all(
            (
                f"GET {path} HTTP/1.1\r\nHost: {host}\r\nUpgrade: websocket\r\n"
                "Connection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                f"Sec-WebSocket-Version: 13\r\nX-Request-Id: {request_id}\r\n\r\n"
            ).encode()
        )
        head = b""
        with trio.fail_after(10):
            while b"\r\n\r\n" not in head:
                chunk = await stream.receive_some(4096)
                if not chunk:
                    break
                head += chunk
    return head.decode("latin-1")


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


async def test_request_ids_json_lines_and_a_redacted_access_log(tmp_path: Path) -> None:
    async with open_up(tmp_path, "--log-format", "json") as up:
        auth = {"Authorization": f"Bearer {up.key}"}
        async with httpx.AsyncClient(base_url=up.url, timeout=30) as http:
            made = (await http.get("/readyz")).headers["X-Request-Id"]
            assert re.fullmatch(r"[0-9a-f]{24}", made)
            kept = await http.get("/whoami", headers={**auth, "X-Request-Id": "lb-42.a:b_c"})
            assert kept.headers["X-Request-Id"] == "lb-42.a:b_c"
            insane = await http.get("/readyz", headers={"X-Request-Id": "x" * 200})
            assert re.fullmatch(r"[0-9a-f]{24}", insane.headers["X-Request-Id"])
            # errors carry it too, and secrets in URLs never reach the log
            missing = await http.get(
                f"/v1/instances/android_nope/watch?token={_SECRET}&x=1",
                headers={"X-Request-Id": "watch-1"},
            )
            assert missing.headers["X-Request-Id"] == "watch-1" and missing.status_code >= 400
            signed = await http.get(f"/blobs/a?sig={_SECRET}&api_key=plain-secret-value")
            assert "X-Request-Id" in signed.headers
            unknown = await http.get(f"/no/such/{_SECRET}")
            assert unknown.status_code == 404 and "X-Request-Id" in unknown.headers

        # a WebSocket refused by the edge: its refusal, and the edge's log line, carry the id
        refusal = await _websocket_upgrade(up.url, "/v1/host_connections", "ws-1")
        assert refusal.startswith("HTTP/1.1 401"), refusal
        assert "\r\nx-request-id: ws-1\r\n" in refusal.lower()

        with trio.fail_after(10):
            # the edge's line, then the access line: another process writes them
            while up.log_text().count('"request_id": "ws-1"') < 2:  # noqa: ASYNC110
                await trio.sleep(0.05)
        text = up.log_text()
        assert _SECRET not in text and "plain-secret-value" not in text
        assert up.key not in text
        lines = _lines(text)  # every line is one JSON object
        assert {"ts", "level", "logger", "message"} <= set(lines[0])
        access = [line for line in lines if line["logger"] == "devyard.access"]
        by_id = {line.get("request_id"): line["message"] for line in access}
        assert by_id[made].startswith("GET /readyz 200")
        assert by_id["lb-42.a:b_c"].startswith("GET /whoami 200")
        assert "token=REDACTED&x=1" in by_id["watch-1"]
        assert any("sig=REDACTED&api_key=REDACTED" in m for m in by_id.values())
        caused = [line for line in lines if line.get("request_id") == "ws-1"]
        assert {line["logger"] for line in caused} >= {
            "devyard.access",
            "devyard.server.edge._route",
        }


def _record(message: str) -> logging.LogRecord:
    return logging.LogRecord("devyard.x", logging.INFO, __file__, 1, message, (), None)


def test_text_and_json_lines_carry_the_request_id_only_inside_a_request() -> None:
    def render(formatter: logging.Formatter) -> str:
        out = io.StringIO()
        handler = logging.StreamHandler(out)
        handler.setFormatter(formatter)
        handler.addFilter(RequestIdFilter())
        handler.handle(_record("outside"))
        token = REQUEST_ID.set("r-1")
        try:
            handler.handle(_record("inside\nsecond line"))
        finally:
            REQUEST_ID.reset(token)
        return out.getvalue()

    text = render(text_formatter())
    outside, inside = text.split("\n", 1)
    assert outside.endswith("devyard.x: outside")
    assert inside.rstrip("\n").endswith("request_id=r-1")
    json_lines = render(JsonFormatter()).splitlines()
    assert len(json_lines) == 2, "one line per event, even for a message with a newline"
    first, second = (json.loads(line) for line in json_lines)
    assert "request_id" not in first and first["message"] == "outside"
    assert second["request_id"] == "r-1" and second["message"] == "inside\nsecond line"
