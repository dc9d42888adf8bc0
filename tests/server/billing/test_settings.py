"""The payment provider's config keys: read from the file or the environment at load, the
secret key from a file, never in a repr; a stripe provider without its secrets is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from devyard.server.billing.settings import ProviderKind, UnpaidPolicy
from devyard.server.config import ConfigError, load_server_config


def test_stripe_from_the_environment_with_the_key_in_a_file(tmp_path: Path) -> None:
    key = tmp_path / "stripe-key"
    key.write_text("sk_test_from_file\n")
    config = load_server_config(
        env={
            "DEVYARD_DATA_DIR": str(tmp_path),
            "DEVYARD_BILLING_PROVIDER": "stripe",
            "DEVYARD_BILLING_STRIPE_SECRET_KEY_FILE": str(key),
            "DEVYARD_BILLING_STRIPE_WEBHOOK_SECRETS": "whsec_a, whsec_b",
            "DEVYARD_BILLING_UNPAID_POLICY": "allow",
        }
    )
    payments = config.payments
    assert payments.provider is ProviderKind.STRIPE
    assert payments.stripe_secret_key == "sk_test_from_file"
    assert payments.stripe_webhook_secrets == ("whsec_a", "whsec_b")
    assert payments.unpaid_policy is UnpaidPolicy.ALLOW
    assert "sk_test" not in repr(config) and "whsec" not in repr(config)


@pytest.mark.parametrize(
    ("env", "words"),
    [
        ({"DEVYARD_BILLING_PROVIDER": "stripe"}, "stripe_secret_key"),
        ({"DEVYARD_BILLING_PROVIDER": "stripe", "DEVYARD_BILLING_STRIPE_SECRET_KEY": "sk_x"},
         "stripe_webhook_secrets"),
        ({"DEVYARD_BILLING_PROVIDER": "paypal"}, "BILLING_PROVIDER"),
        ({"DEVYARD_BILLING_STRIPE_SECRET_KEY_FILE": "/nonexistent/key"}, "secret_key_file"),
        ({"DEVYARD_BILLING_PROVIDER_TIMEOUT_S": "0"}, "PROVIDER_TIMEOUT_S"),
    ],
)  # fmt: skip
def test_wrong_provider_settings_stop_the_server(
    tmp_path: Path, env: dict[str, str], words: str
) -> None:
    with pytest.raises(ConfigError, match=words):
        load_server_config(env={"DEVYARD_DATA_DIR": str(tmp_path), **env})
