"""Parsing the command lines adb sends: a small, pure subset of POSIX `sh` grammar.

adb quotes every argument it builds (`pm 'install' '/data/local/tmp/a.apk'`) and adds
redirections of its own (`rm '/data/local/tmp/a.apk' </dev/null`); tools pipe through `grep`.
So we take: words with '...', "..." and backslash quoting; `;`, newlines, `&&` and `||` between
pipelines; `|` between commands; and the redirections `<`, `>`, `>>`, `2>`, `2>>`, `2>&1`,
`>&2`. Not taken, with a ParseError: `&` (background), `$(...)` and backquotes, subshells. `$`
is an ordinary character: nothing is expanded.
"""

from __future__ import annotations

from typing import Final

import attrs

__all__ = ["Command", "ParseError", "Redirect", "parse_line"]

_OPERATORS: Final = ("&&", "||", ">>", ";", "\n", "|", "<", ">", "&")


class ParseError(ValueError):
    """The line uses shell syntax we do not support, or is malformed."""


@attrs.frozen
class Redirect:
    fd: int  # 0, 1 or 2
    target: str  # a path, or "&1" / "&2"
    append: bool = False


@attrs.frozen
class Command:
    argv: tuple[str, ...]
    redirects: tuple[Redirect, ...] = ()


#: [(connector, pipeline)]: connector is "" for the first, then ";", "&&" or "||".
Line = list[tuple[str, list[Command]]]


def _double_quoted(line: str, start: int) -> tuple[str, int]:
    """The text of the "..." at `start` and the index after it."""
    chars: list[str] = []
    i, n = start + 1, len(line)
    while i < n and line[i] != '"':
        if line[i] == "\\" and i + 1 < n and line[i + 1] in '"\\$`\n':
            i += 1
        if line[i] == "`" or line.startswith("$(", i):
            raise ParseError("command substitution is not supported")
        chars.append(line[i])
        i += 1
    if i >= n:
        raise ParseError("unterminated quoted string")
    return "".join(chars), i + 1


def _tokens(line: str) -> list[tuple[bool, str]]:
    """(is_operator, text) tokens; quoting removed from words."""
    tokens: list[tuple[bool, str]] = []
    word: list[str] = []
    started = False  # a word is open (it may be an empty quoted string)
    quoted = False  # the open word had quoting (so `2` before `>` is not an fd)
    i, n = 0, len(line)

    def flush() -> None:
        nonlocal started, quoted
        if started:
            tokens.append((False, "".join(word)))
        word.clear()
        started = quoted = False

    while i < n:
        c = line[i]
        if c in " \t":
            flush()
            i += 1
        elif c == "'":
            end = line.find("'", i + 1)
            if end < 0:
                raise ParseError("unterminated quoted string")
            word.append(line[i + 1 : end])
            started = quoted = True
            i = end + 1
        elif c == '"':
            text, i = _double_quoted(line, i)
            word.append(text)
            started = quoted = True
        elif c == "\\":
            if i + 1 < n and line[i + 1] != "\n":
                word.append(line[i + 1])
                started = quoted = True
            i += 2
        elif c == "`" or line.startswith("$(", i) or c in "()":
            raise ParseError(f"'{c}' (subshells, substitutions) is not supported")
        elif op := next((op for op in _OPERATORS if line.startswith(op, i)), None):
            if (
                op in ("<", ">", ">>")
                and started
                and not quoted
                and "".join(word) in ("0", "1", "2")
            ):
                fd = "".join(word)
                word.clear()
                started = False
                tokens.append((True, fd + op))
            else:
                flush()
                tokens.append((True, ";" if op == "\n" else op))
            i += len(op)
        else:
            word.append(c)
            started = True
            i += 1
    flush()
    return tokens


def _redirect(op: str, target: str) -> Redirect:
    fd_text = op.rstrip("<>")
    fd = int(fd_text) if fd_text else (0 if op.endswith("<") else 1)
    return Redirect(fd, target, append=op.endswith(">>"))


def parse_line(line: str) -> Line:
    tokens = _tokens(line)
    result: Line = []
    connector = ""
    pipeline: list[Command] = []
    argv: list[str] = []
    redirects: list[Redirect] = []

    def end_command() -> None:
        if not argv and not redirects:
            raise ParseError("syntax error: missing command")
        pipeline.append(Command(tuple(argv), tuple(redirects)))
        argv.clear()
        redirects.clear()

    i = 0
    while i < len(tokens):
        is_op, text = tokens[i]
        if not is_op:
            argv.append(text)
        elif text == "&":
            raise ParseError("'&' (background jobs) is not supported")
        elif text.endswith(("<", ">")):
            if i + 1 < len(tokens) and tokens[i + 1] == (True, "&"):
                # `2>&1`, `>&2`: the descriptor is the next word
                if i + 2 >= len(tokens) or tokens[i + 2][1] not in ("1", "2"):
                    raise ParseError(f"syntax error near {text}&")
                redirects.append(_redirect(text, "&" + tokens[i + 2][1]))
                i += 3
                continue
            if i + 1 >= len(tokens) or tokens[i + 1][0]:
                raise ParseError(f"syntax error: {text} needs a file")
            redirects.append(_redirect(text, tokens[i + 1][1]))
            i += 1
        elif text == "|":
            end_command()
        else:  # ; && ||
            if argv or redirects:
                end_command()
            if pipeline:
                result.append((connector, pipeline))
            elif text != ";":
                raise ParseError(f"syntax error near {text}")
            connector, pipeline = text, []
        i += 1
    if argv or redirects:
        end_command()
    elif pipeline:
        raise ParseError("syntax error: missing command after |")
    if pipeline:
        result.append((connector, pipeline))
    return result
