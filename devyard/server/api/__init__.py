"""devyard."""
