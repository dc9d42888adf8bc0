"""The payment-provider keys of the ``[billing]`` config (the plan catalog is `plans`).
Parsed by `devyard.server.config` (``billing.`` prefixed; environment ``DEVYARD_BILLING_<KEY>``)::

    [billing]
    provider = "stripe"                    # "none" (default): devyard bills nobody
    stripe_secret_key_file = "/run/secrets/stripe"   # or stripe_secret_key (env), never logged
    stripe_webhook_secrets = ["whsec_..."] # endpoint secrets; several while rotating
    stripe_api_base = "https://api.stripe.com"       # another base (a proxy, the tests' fake)
    return_url = "https://console.example.com/billing"  # where portal and checkout return
    unpaid_policy = "block_creates"        # or "allow": what an unpaid organization may do
    provider_timeout_s = 20                # one provider call, retries included
    provider_retries = 2                   # the provider client's retries (same idempotency key)
    provider_concurrency = 4               # provider calls in flight at once (worker threads)

The secret key file is read here, at config load, and kept out of every repr.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, Final

import attrs

__all__ = ["PARSERS", "ProviderConfig", "ProviderKind", "UnpaidPolicy", "build"]


class ProviderKind(enum.StrEnum):
    NONE = "none"
    STRIPE = "stripe"


class UnpaidPolicy(enum.StrEnum):
    BLOCK_CREATES = "block_creates"  # no new instances (402 payment_required); data kept
    ALLOW = "allow"  # unpaid changes nothing devyard enforces


@attrs.frozen
class ProviderConfig:
    provider: ProviderKind = ProviderKind.NONE
    stripe_secret_key: str | None = attrs.field(default=None, repr=False)
    stripe_webhook_secrets: tuple[str, ...] = attrs.field(default=(), repr=False)
    stripe_api_base: str | None = None
    return_url: str | None = None
    unpaid_policy: UnpaidPolicy = UnpaidPolicy.BLOCK_CREATES
    provider_timeout_s: float = 20.0
    provider_retries: int = 2
    provider_concurrency: int = 4


def _text(value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError("expected a non-empty string")
    return value.strip()


def _secrets(value: object) -> tuple[str, ...]:
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple) or not all(isinstance(i, str) for i in items):
        raise ValueError("expected a list of whsec_... strings (env: comma-separated)")
    secrets = tuple(i.strip() for i in items if i.strip())
    if not secrets:
        raise ValueError("expected at least one webhook secret")
    return secrets


def _url(value: object) -> str:
    text = _text(value)
    if not text.startswith(("https://", "http://")):
        raise ValueError("expected an http(s) URL")
    return text.rstrip("/")


def _number(low: float, high: float, kind: Callable[[Any], Any]) -> Callable[[object], Any]:
    def parse(value: object) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | float | str):
            raise ValueError(f"expected a number from {low} to {high}")
        try:
            number = kind(value)
        except ValueError:
            raise ValueError(f"expected a number from {low} to {high}") from None
        if not low <= number <= high:
            raise ValueError(f"expected a number from {low} to {high}")
        return number

    return parse


PARSERS: Final[Mapping[str, Callable[[object], Any]]] = {
    "provider": lambda v: ProviderKind(_text(v)),
    "stripe_secret_key": _text,
    "stripe_secret_key_file": lambda v: Path(_text(v)),
    "stripe_webhook_secrets": _secrets,
    "stripe_api_base": _url,
    "return_url": _url,
    "unpaid_policy": lambda v: UnpaidPolicy(_text(v)),
    "provider_timeout_s": _number(1, 300, float),
    "provider_retries": _number(0, 5, int),
    "provider_concurrency": _number(1, 64, int),
}


def build(values: Mapping[str, Any]) -> ProviderConfig:
    """The settings from parsed values keyed without the ``billing.`` prefix (the catalog's
    keys, ``plans`` and ``default_plan``, are not given here)."""
    fields = dict(values)
    key_file = fields.pop("stripe_secret_key_file", None)
    if key_file is not None:
        if "stripe_secret_key" in fields:
            raise ValueError("billing: give stripe_secret_key or stripe_secret_key_file, not both")
        try:
            fields["stripe_secret_key"] = key_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise ValueError(f"billing.stripe_secret_key_file: {exc.strerror}") from None
    config = ProviderConfig(**fields)
    if config.provider is ProviderKind.STRIPE:
        if not config.stripe_secret_key:
            raise ValueError("billing.provider = stripe needs stripe_secret_key(_file)")
        if not config.stripe_webhook_secrets:
            raise ValueError("billing.provider = stripe needs stripe_webhook_secrets")
    return config
