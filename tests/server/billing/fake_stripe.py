"""A loopback HTTP server answering the Stripe API endpoints devyard's stripe provider calls,
with objects shaped as in Stripe's API reference (docs.stripe.com/api: customer, payment
method, billing_portal.session, checkout.session, subscription, subscription_schedule,
invoice, error). We cannot reach Stripe from here; the real `stripe` package is the client,
pointed at this server through ``billing.stripe_api_base``.

It records every request (method, path, decoded form or query, Idempotency-Key) so a test can
check what the provider was asked, and can be told to fail the next N requests with a 500
(``Stripe-Should-Retry: true``) to exercise the client's retries.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qsl, urlsplit

import attrs

__all__ = ["FakeStripe", "Request", "running"]

PERIOD_START = 1_900_000_000
PERIOD_END = PERIOD_START + 30 * 86400


@attrs.frozen
class Request:
    method: str
    path: str
    params: dict[str, str]  # flattened form keys, e.g. "line_items[0][price]"
    idempotency_key: str | None


class FakeStripe:
    def __init__(self) -> None:
        self.requests: list[Request] = []
        self.customers: dict[str, dict[str, Any]] = {}
        self.subscriptions: dict[str, dict[str, Any]] = {}
        self.schedules: dict[str, dict[str, Any]] = {}
        self.fail_next = 0
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self.url = ""

    def new_id(self, prefix: str) -> str:
        return f"{prefix}_test{next(self._ids):04d}"

    def add_subscription(self, customer: str, price: str) -> dict[str, Any]:
        sub_id = self.new_id("sub")
        sub = {
            "id": sub_id, "object": "subscription", "customer": customer, "status": "active",
            "schedule": None, "metadata": {},
            "items": {"object": "list", "data": [{
                "id": self.new_id("si"), "object": "subscription_item", "quantity": 1,
                "price": {"id": price, "object": "price", "currency": "usd"},
                "current_period_start": PERIOD_START, "current_period_end": PERIOD_END,
            }]},
        }  # fmt: skip
        self.subscriptions[sub_id] = sub
        return sub

    def calls(self, method: str, path: str) -> list[Request]:
        return [r for r in self.requests if r.method == method and re.fullmatch(path, r.path)]

    def answer(self, method: str, path: str, params: dict[str, str]) -> tuple[int, Any]:
        if method == "POST" and path == "/v1/customers":
            cus: dict[str, Any] = {
                "id": self.new_id("cus"), "object": "customer", "email": params.get("email"),
                "metadata": {"devyard_org": params.get("metadata[devyard_org]")},
                "invoice_settings": {"default_payment_method": None}, "livemode": False,
            }  # fmt: skip
            self.customers[cus["id"]] = cus
            return 200, cus
        if match := re.fullmatch(r"/v1/customers/(\w+)", path):
            found = self.customers.get(match[1])
            if found is None:
                return 404, _error("resource_missing", f"No such customer: '{match[1]}'")
            expanded = dict(found)
            if params.get("expand[0]") == "invoice_settings.default_payment_method":
                expanded["invoice_settings"] = {"default_payment_method": {
                    "id": "pm_test_card", "object": "payment_method", "type": "card",
                    "customer": found["id"],
                    "card": {"brand": "visa", "last4": "4242", "exp_month": 8, "exp_year": 2031},
                }}  # fmt: skip
            return 200, expanded
        if path == "/v1/billing_portal/sessions":
            return 200, {
                "id": self.new_id("bps"), "object": "billing_portal.session",
                "customer": params["customer"], "return_url": params.get("return_url"),
                "flow": {"type": params["flow_data[type]"]} if "flow_data[type]" in params
                else None,
                "url": f"https://billing.stripe.test/p/session/{params['customer']}",
                "livemode": False,
            }  # fmt: skip
        if path == "/v1/checkout/sessions":
            cs = self.new_id("cs")
            return 200, {
                "id": cs, "object": "checkout.session", "mode": params["mode"], "status": "open",
                "customer": params["customer"],
                "client_reference_id": params.get("client_reference_id"),
                "url": f"https://checkout.stripe.test/c/pay/{cs}", "livemode": False,
            }  # fmt: skip
        if match := re.fullmatch(r"/v1/subscriptions/(\w+)", path):
            return 200, self.subscriptions[match[1]]
        if path == "/v1/subscription_schedules":
            sub = self.subscriptions[params["from_subscription"]]
            item = sub["items"]["data"][0]
            schedule = {
                "id": self.new_id("sub_sched"), "object": "subscription_schedule",
                "subscription": sub["id"], "status": "active", "end_behavior": "release",
                "phases": [{"start_date": PERIOD_START, "end_date": PERIOD_END,
                            "items": [{"price": item["price"]["id"], "quantity": 1}]}],
            }  # fmt: skip
            sub["schedule"] = schedule["id"]
            self.schedules[schedule["id"]] = schedule
            return 200, schedule
        if match := re.fullmatch(r"/v1/subscription_schedules/(\w+)/release", path):
            schedule = self.schedules[match[1]]
            schedule["status"] = "released"
            self.subscriptions[schedule["subscription"]]["schedule"] = None
            return 200, schedule
        if match := re.fullmatch(r"/v1/subscription_schedules/(\w+)", path):
            return 200, self.schedules[match[1]]
        if path == "/v1/invoices/create_preview":
            return 200, {
                "id": "upcoming_in_test", "object": "invoice", "customer": params["customer"],
                "subscription": params.get("subscription"), "amount_due": 4900,
                "currency": "usd", "period_start": PERIOD_START, "period_end": PERIOD_END,
                "next_payment_attempt": PERIOD_END + 3600, "livemode": False,
            }  # fmt: skip
        return 404, _error("resource_missing", f"Unrecognized request URL ({method}: {path})")


def _error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"type": "invalid_request_error", "code": code, "message": message}}


def _handler(fake: FakeStripe) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("Content-Length") or 0)
            form = self.rfile.read(length).decode() if length else ""
            params = dict(parse_qsl(parts.query)) | dict(parse_qsl(form))
            with fake._lock:
                fake.requests.append(
                    Request(method, parts.path, params, self.headers.get("Idempotency-Key"))
                )
                if fake.fail_next > 0:
                    fake.fail_next -= 1
                    status, body = 500, _error("api_error", "Something went wrong")
                else:
                    status, body = fake.answer(method, parts.path, params)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 500:
                self.send_header("Stripe-Should-Retry", "true")
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            self._serve("GET")

        def do_POST(self) -> None:
            self._serve("POST")

        def do_DELETE(self) -> None:
            self._serve("DELETE")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


def running() -> Iterator[FakeStripe]:
    """A started fake on 127.0.0.1 (a free port); stopped when the generator closes."""
    fake = FakeStripe()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(fake))
    fake.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield fake
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)
