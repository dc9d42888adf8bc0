"""The Python client of the devyard API and the user-facing CLI commands."""
