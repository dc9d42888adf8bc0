"""The tunnel connector that runs inside a customer network."""
