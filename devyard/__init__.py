"""devyard: an open, self-hostable remote device service on trio."""

__version__ = "0.1.0"

__all__ = ["__version__"]
