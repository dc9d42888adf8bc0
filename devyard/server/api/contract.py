"""The OpenAPI document as the API's executable contract.

``openapi.yaml`` beside this module is authoritative. At start-up :class:`Contract` indexes
its operations by ``(method, path template)`` and compiles a JSON Schema validator for every
parameter and request body. Before any handler runs, the app asks the contract for the
request's operation and validates the path parameters, query parameters and JSON body against
it; what fails is a :class:`BadRequest` whose message names the field. So a handler only ever
sees input the document allows, and the document cannot promise less than the server checks.

OpenAPI 3.1 schemas are JSON Schema 2020-12, so validators are compiled straight from the
document, with ``#/components/...`` references resolved inside it.
"""

from __future__ import annotations

import json
import re
import zoneinfo
from collections.abc import Mapping
from importlib import resources
from typing import Any, Final

import attrs
import jsonschema_rs
import yaml

from ..store.base import Role
from ._errors import BadRequest
from .scopes import Template, parse_template

__all__ = ["MAX_DEPTH", "MAX_NUMBER", "Contract", "Operation", "Parameter", "load_document"]

_METHODS: Final = ("get", "put", "post", "delete", "patch")
_RULE_VAR: Final = re.compile(r"<(?:[^:<>]+:)?([^<>]+)>")
_DRAFT: Final = "https://json-schema.org/draft/2020-12/schema"
_MAX_ECHO: Final = 80
_INTEGER: Final = re.compile(r"-?[0-9]{1,18}")
MAX_DEPTH: Final = 32  # nesting of a request body; the document's deepest is under 10
MAX_NUMBER: Final = 2**63 - 1  # no field of the document holds more; the databases hold this


def load_document() -> dict[str, Any]:
    """The packaged ``openapi.yaml`` as a JSON-compatible dict, with the IANA time zones this
    server knows filled into the ``TimeZone`` schema's ``enum`` (``x-devyard-enum:
    iana-timezones``): the document then says exactly which names a ``timezone`` takes, so
    a schema-valid value is never refused."""
    text = resources.files(__package__).joinpath("openapi.yaml").read_text(encoding="utf-8")
    # libyaml's safe loader when PyYAML has it (0.17 s here against 0.7 s in pure Python, at
    # every server start); the same safe constructors either way
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    document = yaml.load(text, Loader=loader)  # noqa: S506 - a safe loader, C or Python
    assert isinstance(document, dict)
    for schema in document.get("components", {}).get("schemas", {}).values():
        if isinstance(schema, dict) and schema.get("x-devyard-enum") == "iana-timezones":
            schema["enum"] = sorted(zoneinfo.available_timezones())
    return document


def rule_to_template(rule: str) -> str:
    """``/users/<userName>`` (the framework's spelling) -> ``/users/{userName}``."""
    return _RULE_VAR.sub(r"{\1}", rule)


@attrs.frozen
class Parameter:
    name: str
    location: str  # "path" | "query"
    required: bool
    schema: Mapping[str, Any] = attrs.field(repr=False)
    validator: jsonschema_rs.Validator = attrs.field(repr=False, eq=False)


@attrs.frozen
class Operation:
    method: str  # upper case
    template: str
    operation_id: str
    auth: str  # "required" | "optional" | "none"
    role: Role | None  # the least role, for authenticated operations
    parameters: tuple[Parameter, ...] = attrs.field(repr=False)
    body: jsonschema_rs.Validator | None = attrs.field(repr=False, eq=False)
    scope: Template | None = None  # x-devyard-scope: the scoped tokens it admits (scopes.py)
    any_token: bool = False  # x-devyard-any-token: every scoped token may call it (/whoami)

    @property
    def safe(self) -> bool:
        """Whether a read-only key may call it."""
        return self.method == "GET"


def _describe(error: jsonschema_rs.ValidationError) -> str:
    """A short, bounded message: jsonschema messages echo the whole offending value."""
    kind = error.kind
    match kind:
        case jsonschema_rs.ValidationErrorKind.MaxLength(limit=limit):
            return f"must be at most {limit} characters long"
        case jsonschema_rs.ValidationErrorKind.MinLength(limit=1):
            return "must not be empty"
        case jsonschema_rs.ValidationErrorKind.MinLength(limit=limit):
            return f"must be at least {limit} characters long"
        case jsonschema_rs.ValidationErrorKind.Pattern(pattern=pattern):
            return f"does not match the pattern {pattern}"
        case jsonschema_rs.ValidationErrorKind.Type(types=types):
            return f"must be of type {' or '.join(types)}"
        case jsonschema_rs.ValidationErrorKind.Format(format=fmt):
            return f"is not a valid {fmt}"
        case jsonschema_rs.ValidationErrorKind.OneOfNotValid() | (
            jsonschema_rs.ValidationErrorKind.AnyOf()
        ):
            return "is not valid for any of the allowed forms"
    message = error.message
    return message if len(message) <= _MAX_ECHO * 2 else message[: _MAX_ECHO * 2] + "..."


def _field(prefix: str, path: list[str | int]) -> str:
    name = prefix
    for part in path:
        name += f"[{part}]" if isinstance(part, int) else (f".{part}" if name else part)
    return name or "body"


def _first_error(
    validator: jsonschema_rs.Validator, instance: object
) -> jsonschema_rs.ValidationError | None:
    for error in validator.iter_errors(instance):
        return error
    return None


class Contract:
    """The operations of an OpenAPI document, with compiled validators."""

    def __init__(self, document: Mapping[str, Any]) -> None:
        self.document: Final = document
        self._components = document.get("components", {})
        self._operations: dict[tuple[str, str], Operation] = {}
        global_security = document.get("security", [])
        for template, item in document.get("paths", {}).items():
            shared = item.get("parameters", [])
            for method in _METHODS:
                spec = item.get(method)
                if spec is None:
                    continue
                security = spec.get("security", global_security)
                if not security:
                    auth = "none"
                elif {} in security:
                    auth = "optional"
                else:
                    auth = "required"
                role = spec.get("x-devyard-role")
                if auth == "required" and role is None:
                    raise ValueError(f"{method} {template}: no x-devyard-role")
                params = tuple(self._parameter(p) for p in [*shared, *spec.get("parameters", [])])
                body = spec.get("requestBody")
                body_validator = None
                if body is not None:
                    schema = body["content"]["application/json"]["schema"]
                    body_validator = self._compile(schema)
                self._operations[(method.upper(), template)] = Operation(
                    method=method.upper(),
                    template=template,
                    operation_id=spec["operationId"],
                    auth=auth,
                    role=Role(role) if role is not None else None,
                    parameters=params,
                    body=body_validator,
                    scope=_scope(spec.get("x-devyard-scope")),
                    any_token=spec.get("x-devyard-any-token") is True,
                )

    def __repr__(self) -> str:
        return f"Contract({len(self._operations)} operations)"

    def _resolve(self, node: Mapping[str, Any]) -> Mapping[str, Any]:
        ref = node.get("$ref")
        if ref is None:
            return node
        target: Any = self.document
        for part in ref.removeprefix("#/").split("/"):
            target = target[part]
        return self._resolve(target)

    def _compile(self, schema: Mapping[str, Any]) -> jsonschema_rs.Validator:
        root = {"$schema": _DRAFT, **schema, "components": self._components}
        return jsonschema_rs.Draft202012Validator(root, validate_formats=True)

    def _parameter(self, node: Mapping[str, Any]) -> Parameter:
        spec = self._resolve(node)
        if spec["in"] not in ("path", "query"):
            raise ValueError(f"parameter {spec['name']}: only path and query are supported")
        schema = spec.get("schema", {})
        return Parameter(
            name=spec["name"],
            location=spec["in"],
            required=bool(spec.get("required", False)),
            schema=schema,
            validator=self._compile(schema),
        )

    @property
    def operations(self) -> list[Operation]:
        return list(self._operations.values())

    def operation(self, method: str, rule: str) -> Operation | None:
        """The operation a request routed to *rule* performs (HEAD reads like GET)."""
        method = "GET" if method == "HEAD" else method
        return self._operations.get((method, rule_to_template(rule)))

    # -- request validation: raise BadRequest naming the field -----------------------------

    def parameters(
        self,
        operation: Operation,
        path: Mapping[str, str],
        query: Mapping[str, str],
    ) -> dict[str, object]:
        """The operation's path and query parameters, typed, defaults applied."""
        values: dict[str, object] = {}
        for param in operation.parameters:
            where = f"{param.location} parameter {param.name}"
            raw = (path if param.location == "path" else query).get(param.name)
            if raw is None:
                if param.required:
                    raise BadRequest(f"{where} is required", reason="missing_parameter")
                if "default" in param.schema:
                    values[param.name] = param.schema["default"]
                continue
            value = _coerce(raw, param.schema, where)
            error = _first_error(param.validator, value)
            if error is not None:
                raise BadRequest(f"{where} {_describe(error)}", reason="invalid_parameter")
            values[param.name] = value
        return values

    def body(self, operation: Operation, raw: bytes) -> object:
        """The operation's JSON body, parsed and valid, or None for operations without one."""
        if operation.body is None:
            return None
        if not raw.strip():
            raise BadRequest("a JSON request body is required", reason="invalid_body")
        try:
            # Strict UTF-8 (RFC 8259 8.1): json.loads(bytes) would decode with surrogatepass
            # and let the raw bytes of a lone surrogate through.
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise BadRequest(
                f"the body is not valid JSON: not UTF-8 at byte {exc.start}", reason="invalid_json"
            ) from exc
        try:
            value = json.loads(text, parse_constant=_reject_constant)
        except (ValueError, RecursionError) as exc:
            raise BadRequest(
                f"the body is not valid JSON: {str(exc)[:_MAX_ECHO]}", reason="invalid_json"
            ) from exc
        _check_plain(value)
        error = _first_error(operation.body, value)
        if error is not None:
            field = _field("", error.instance_path)
            kind = error.kind
            if isinstance(kind, jsonschema_rs.ValidationErrorKind.Required):
                field = _field("", [*error.instance_path, kind.property])
                raise BadRequest(f"{field} is required", reason="invalid_body")
            if isinstance(kind, jsonschema_rs.ValidationErrorKind.AdditionalProperties):
                unexpected = ", ".join(repr(name)[:_MAX_ECHO] for name in kind.unexpected)
                raise BadRequest(f"{field}: unknown field {unexpected}", reason="invalid_body")
            raise BadRequest(f"{field} {_describe(error)}", reason="invalid_body")
        return value


def _check_plain(value: object) -> None:
    """Refuse what parses as JSON but nothing downstream can hold: a string with a lone
    surrogate (``"\\ud800"`` is valid JSON syntax, yet no UTF-8 text; the database, the
    validator and the JSON encoder all fail on it), nesting deeper than `MAX_DEPTH`, and
    numbers beyond `MAX_NUMBER` in magnitude. Walked without recursion."""
    pending: list[tuple[object, str, int]] = [(value, "", 0)]
    while pending:
        item, where, depth = pending.pop()
        if depth > MAX_DEPTH:
            raise BadRequest(
                f"the body nests deeper than {MAX_DEPTH} levels", reason="invalid_json"
            )
        if isinstance(item, str):
            _check_text(item, where)
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int | float):
            if not abs(item) <= MAX_NUMBER:  # also refuses inf from 1e400
                raise BadRequest(f"{where or 'body'} is out of range", reason="invalid_body")
        elif isinstance(item, dict):
            for key, sub in item.items():
                _check_text(key, f"{where or 'body'} key")
                pending.append((sub, f"{where}.{key}" if where else key, depth + 1))
        elif isinstance(item, list):
            pending.extend((sub, f"{where}[{i}]", depth + 1) for i, sub in enumerate(item))


def _check_text(text: str, where: str) -> None:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise BadRequest(
            f"{where[:_MAX_ECHO] or 'body'} is not valid Unicode text (a lone surrogate)",
            reason="invalid_body",
        ) from exc


def _scope(value: object) -> Template | None:
    return None if value is None else parse_template(str(value))


def _reject_constant(name: str) -> object:
    raise ValueError(f"{name} is not a JSON number")


def _coerce(raw: str, schema: Mapping[str, Any], where: str) -> object:
    """A query or path string as the JSON type its schema declares."""
    kind = schema.get("type", "string")
    if kind == "boolean":
        if raw in ("true", "false"):
            return raw == "true"
        raise BadRequest(f"{where} must be true or false", reason="invalid_parameter")
    if kind == "integer":
        if not _INTEGER.fullmatch(raw):
            raise BadRequest(f"{where} must be an integer", reason="invalid_parameter")
        return int(raw)
    return raw
