"""The control API: a Quart-Trio app served by Hypercorn's trio worker.

The only package that imports the web stack (checked by import-linter). ``openapi.yaml``
beside this file is the authoritative description of the API; docs/api.md explains the
decisions where the spec is silent.
"""

from ._errors import APIError
from .app import api_state, create_app
from .serve import BoundServer, serve_api

__all__ = ["APIError", "BoundServer", "api_state", "create_app", "serve_api"]
