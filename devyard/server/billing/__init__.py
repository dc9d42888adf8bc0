"""Billing: the plan catalog, invoices from usage, and the payment provider's webhook.

Pure parts (``plans``, ``invoices``) compute; ``webhook`` verifies what the provider sends.
docs/billing.md states the decisions where the spec is silent.
"""
