"""The browser sandbox: a real headless Chromium per instance, driven over CDP (docs/sandbox.md)."""

from .chromium import DEFAULT_CHROMIUM, BrowserConfig, Chromium
from .sandbox import PageScreen, browser_config, run_browser_sandbox, serve_cdp, wants_browser

__all__ = [
    "DEFAULT_CHROMIUM",
    "BrowserConfig",
    "Chromium",
    "PageScreen",
    "browser_config",
    "run_browser_sandbox",
    "serve_cdp",
    "wants_browser",
]
