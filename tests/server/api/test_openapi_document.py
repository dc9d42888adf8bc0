"""openapi.yaml is a valid OpenAPI 3.1 document, and says what its author wrote.

`openapi-spec-validator` checks the document against the OpenAPI 3.1 meta-schema. That schema
lets a Schema Object carry any extra keyword (JSON Schema 2020-12 ignores unknown ones), so a
flow mapping such as ``{type: string, description: Lower-case hex, once uploaded.}`` passes it
while YAML reads a second key ``once uploaded.`` with a null value and the description loses
its end. The keyword check below closes that gap; duplicate keys, which PyYAML silently
overwrites, are refused by the loader.
"""

from __future__ import annotations

from collections.abc import Iterator
from importlib import resources
from typing import Any, Final

import pytest
import yaml
from openapi_spec_validator import OpenAPIV31SpecValidator

from devyard.server.api.contract import load_document

# JSON Schema 2020-12 (core, applicator, validation, unevaluated, format, meta-data, content)
# plus the OpenAPI 3.1 Schema Object's own fixed fields.
_SCHEMA_KEYWORDS: Final = frozenset(
    {
        "$schema", "$id", "$ref", "$anchor", "$dynamicRef", "$dynamicAnchor", "$defs",
        "$comment", "$vocabulary",
        "allOf", "anyOf", "oneOf", "not", "if", "then", "else", "dependentSchemas",
        "prefixItems", "items", "contains", "properties", "patternProperties",
        "additionalProperties", "propertyNames", "unevaluatedItems", "unevaluatedProperties",
        "type", "enum", "const", "multipleOf", "maximum", "exclusiveMaximum", "minimum",
        "exclusiveMinimum", "maxLength", "minLength", "pattern", "maxItems", "minItems",
        "uniqueItems", "maxContains", "minContains", "maxProperties", "minProperties",
        "required", "dependentRequired", "format",
        "title", "description", "default", "deprecated", "readOnly", "writeOnly", "examples",
        "contentEncoding", "contentMediaType", "contentSchema",
        "discriminator", "xml", "externalDocs", "example",
    }
)  # fmt: skip
_SUBSCHEMA_MAPS: Final = ("properties", "patternProperties", "$defs", "dependentSchemas")
_SUBSCHEMA_LISTS: Final = ("allOf", "anyOf", "oneOf", "prefixItems")
_SUBSCHEMA_ONE: Final = (
    "items", "additionalProperties", "not", "if", "then", "else", "contains", "propertyNames",
    "unevaluatedItems", "unevaluatedProperties", "contentSchema",
)  # fmt: skip


class _StrictLoader(yaml.SafeLoader):
    """PyYAML's safe loader, refusing a mapping that names a key twice."""


def _no_duplicates(loader: _StrictLoader, node: yaml.MappingNode) -> dict[Any, Any]:
    seen: set[Any] = set()
    for key_node, _ in node.value:
        key = loader.construct_object(key_node)
        if key in seen:
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r}", key_node.start_mark
            )
        seen.add(key)
    return loader.construct_mapping(node)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _no_duplicates)


def _schemas(schema: object, where: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Every Schema Object inside *schema* (itself included), with where it is."""
    if not isinstance(schema, dict):
        return
    yield where, schema
    for name in _SUBSCHEMA_MAPS:
        for key, sub in (schema.get(name) or {}).items():
            yield from _schemas(sub, f"{where}/{name}/{key}")
    for name in _SUBSCHEMA_LISTS:
        for index, sub in enumerate(schema.get(name) or []):
            yield from _schemas(sub, f"{where}/{name}/{index}")
    for name in _SUBSCHEMA_ONE:
        if name in schema:
            yield from _schemas(schema[name], f"{where}/{name}")


def _document_schemas(document: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    components = document.get("components", {})
    for name, schema in components.get("schemas", {}).items():
        yield from _schemas(schema, f"#/components/schemas/{name}")
    parameters = list(components.get("parameters", {}).items())
    for template, item in document["paths"].items():
        for index, param in enumerate(item.get("parameters", [])):
            parameters.append((f"{template}/parameters/{index}", param))
        for method, operation in item.items():
            if method == "parameters":
                continue
            for index, param in enumerate(operation.get("parameters", [])):
                parameters.append((f"{template}/{method}/parameters/{index}", param))
            content = operation.get("requestBody", {}).get("content", {})
            for media, entry in content.items():
                yield from _schemas(entry.get("schema"), f"{template}/{method}/body/{media}")
            for status, response in operation.get("responses", {}).items():
                for media, entry in response.get("content", {}).items():
                    yield from _schemas(
                        entry.get("schema"), f"{template}/{method}/{status}/{media}"
                    )
    for where, param in parameters:
        yield from _schemas(param.get("schema"), f"{where}/schema")


def _text() -> str:
    package = resources.files("devyard.server.api")
    return package.joinpath("openapi.yaml").read_text(encoding="utf-8")


def test_the_document_is_valid_openapi_3_1() -> None:
    document = load_document()
    assert str(document["openapi"]).startswith("3.1")
    errors = [
        f"{'/'.join(map(str, error.absolute_path))}: {error.message[:200]}"
        for error in OpenAPIV31SpecValidator(document).iter_errors()
    ]
    assert errors == []


def test_the_yaml_names_no_key_twice() -> None:
    yaml.load(_text(), Loader=_StrictLoader)


def test_every_schema_uses_only_known_keywords() -> None:
    stray = [
        f"{where}: {key!r}"
        for where, schema in _document_schemas(load_document())
        for key in schema
        if key not in _SCHEMA_KEYWORDS and not str(key).startswith("x-")
    ]
    assert stray == []


@pytest.mark.parametrize(
    "text",
    [
        "{type: string, description: Lower-case hex, once uploaded.}",
        "{type: string, description: What went wrong, for people.}",
    ],
)
def test_the_keyword_check_catches_an_unquoted_comma(text: str) -> None:
    schema = yaml.safe_load(text)
    assert [
        key for _, found in _schemas(schema, "") for key in found if key not in _SCHEMA_KEYWORDS
    ]
