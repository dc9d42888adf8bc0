"""Accounts and teams beyond the store: the settings (`settings`), invitation mail over SMTP
(`mail`), DNS verification of email domains (`domains`). Decisions: docs/accounts.md.

The package root imports nothing, so that `devyard.server.config` can import `settings`
without pulling in the SMTP or DNS libraries.
"""
