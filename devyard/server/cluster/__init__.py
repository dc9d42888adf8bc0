"""Several server replicas on one PostgreSQL (issue 23, docs/scale-out.md): replica and host
leases, capacity reservations (`hosts`), the registry of who holds which link (`registry`),
events between replicas by LISTEN/NOTIFY (`bus`), and the one call serve.py makes (`serve`).

Nothing is imported here: `config` imports `cluster.settings` without the rest.
"""
