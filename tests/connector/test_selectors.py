"""The selector grammar (devyard/core/selectors.py, docs/tunnels.md): pure, no trio."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from devyard.core.selectors import (
    SELECTOR_PATTERN,
    Selector,
    SelectorError,
    android_compatible,
    matches,
    parse_dest,
    parse_selector,
    parse_selectors,
)


@pytest.mark.parametrize(
    ("text", "parsed"),
    [
        ("localhost:3000", Selector("localhost", 3000)),
        ("DB.Internal.:5432", Selector("db.internal", 5432)),
        ("10.0.0.5:22", Selector("10.0.0.5", 22)),
        ("*.10.0.0.5", Selector("10.0.0.5", None, wildcard=True)),
        ("*.corp.example:443", Selector("corp.example", 443, wildcard=True)),
        ("*.corp.example", Selector("corp.example", None, wildcard=True)),
    ],
)
def test_valid_selectors_parse_and_print_back(text: str, parsed: Selector) -> None:
    assert parse_selector(text) == parsed
    assert parse_selector(str(parsed)) == parsed


@pytest.mark.parametrize(
    "text",
    [
        "",
        "localhost",
        "*",
        "*.",
        "a*b.example:80",
        "*.[::1]:80",
        "[fd00::1]:8080",
        "host:080",
        "host:0",
        "host:65536",
        "host:port",
        "ho st:80",
        "-bad.example:80",
        "x" * 300 + ":80",
    ],
)
def test_invalid_selectors_say_why(text: str) -> None:
    with pytest.raises(SelectorError, match="selector"):
        parse_selector(text)


def test_matching_exact_and_wildcards() -> None:
    selectors = parse_selectors(["localhost:3000", "*.corp.example:443", "*.lab.example"])
    assert matches(selectors, *parse_dest("LOCALHOST:3000"))
    assert not matches(selectors, *parse_dest("localhost:3001"))
    assert matches(selectors, *parse_dest("git.corp.example:443"))
    assert matches(selectors, *parse_dest("a.b.corp.example:443"))
    assert not matches(selectors, *parse_dest("git.corp.example:80"))
    assert not matches(selectors, *parse_dest("corp.example:443")), "the domain itself is not below"
    assert not matches(selectors, *parse_dest("evilcorp.example:443"))
    assert matches(selectors, *parse_dest("x.lab.example:1"))


def test_duplicates_collapse_and_the_list_is_bounded() -> None:
    assert len(parse_selectors(["a:1", "A:1", "a.:1"])) == 1
    with pytest.raises(SelectorError, match="at most"):
        parse_selectors(f"h{i}:1" for i in range(101))


def test_android_needs_unprivileged_exact_ports() -> None:
    assert android_compatible(parse_selectors(["a:1024", "*.x.example:80", "*.y.example"]))
    assert not android_compatible(parse_selectors(["a:1024", "b:443"]))


@given(st.text(max_size=300))
def test_any_text_parses_or_raises_selector_error(text: str) -> None:
    try:
        selector = parse_selector(text)
    except SelectorError:
        return
    assert parse_selector(str(selector)) == selector


@given(st.from_regex(SELECTOR_PATTERN, fullmatch=True).filter(lambda t: len(t) <= 261))
def test_what_the_api_document_admits_always_parses(text: str) -> None:
    parse_selector(text)  # the API would answer 400 for a selector the document allows


@given(st.text(alphabet="ab.-*:0123456789", max_size=40))
def test_the_parser_admits_only_what_the_pattern_does(text: str) -> None:
    try:
        parse_selector(text)
    except SelectorError:
        return
    assert re.fullmatch(SELECTOR_PATTERN, text)
