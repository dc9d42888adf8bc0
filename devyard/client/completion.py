"""``devyard completion bash|zsh|fish``: a completion script made from the parser itself.

    source <(devyard completion bash)                        # ~/.bashrc
    devyard completion zsh > "${fpath[1]}/_devyard"          # then: compinit
    devyard completion fish > ~/.config/fish/completions/devyard.fish

The script is static (no Python runs on TAB, so completion is instant): a table from each
command path (``devyard android``) to the words that may follow it, its subcommands, options
and fixed choices, and a small function per shell that finds the path typed so far. Words
that are not in the table (ids, files) fall back to file names.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from typing import Final

__all__ = ["SHELLS", "script", "table"]

SHELLS: Final = ("bash", "zsh", "fish")
ROOT: Final = "devyard"


def _children(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _words(parser: argparse.ArgumentParser) -> list[str]:
    words: list[str] = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            words += list(action.choices)
        elif action.option_strings:
            words += [o for o in action.option_strings if o.startswith("--")]
        elif action.choices:
            words += [str(c) for c in action.choices]
    return words


def table(parser: argparse.ArgumentParser) -> dict[str, list[str]]:
    """Each command path (space-separated, from ``devyard``) and its completions."""

    def walk(path: str, node: argparse.ArgumentParser) -> Iterator[tuple[str, list[str]]]:
        yield path, _words(node)
        for name, child in _children(node).items():
            yield from walk(f"{path} {name}", child)

    return dict(walk(ROOT, parser))


def _quote(word: str) -> str:
    return "'" + word.replace("'", "'\\''") + "'"


def _bash(paths: dict[str, list[str]]) -> str:
    entries = "\n".join(f"  [{_quote(p)}]={_quote(' '.join(w))}" for p, w in paths.items())
    return f"""# devyard completion for bash: source <(devyard completion bash)
declare -gA _devyard_words=(
{entries}
)
_devyard() {{
  local cur="${{COMP_WORDS[COMP_CWORD]}}" cmdpath=devyard w i
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${{COMP_WORDS[i]}}"
    [[ $w == -* ]] && continue
    [[ -n "${{_devyard_words["$cmdpath $w"]+set}}" ]] && cmdpath="$cmdpath $w"
  done
  COMPREPLY=($(compgen -W "${{_devyard_words[$cmdpath]}}" -- "$cur"))
}}
complete -o default -F _devyard devyard
"""


def _zsh(paths: dict[str, list[str]]) -> str:
    entries = "\n".join(f"  {_quote(p)} {_quote(' '.join(w))}" for p, w in paths.items())
    return f"""#compdef devyard
# devyard completion for zsh: devyard completion zsh > "${{fpath[1]}}/_devyard"
typeset -gA _devyard_words
_devyard_words=(
{entries}
)
_devyard() {{
  local cmdpath=devyard w
  for w in ${{words[2,CURRENT-1]}}; do
    [[ $w == -* ]] && continue
    (( ${{+_devyard_words[$cmdpath $w]}} )) && cmdpath="$cmdpath $w"
  done
  local -a choices
  choices=(${{=_devyard_words[$cmdpath]}})
  compadd -- $choices
  _files
}}
compdef _devyard devyard
"""


def _fish(paths: dict[str, list[str]]) -> str:
    names = " ".join(_quote(p) for p in paths)
    lines = [
        "# devyard completion for fish: devyard completion fish > "
        "~/.config/fish/completions/devyard.fish",
        f"set -g __devyard_paths {names}",
        "function __devyard_path",
        "    set -l p devyard",
        "    for w in (commandline -opc)[2..-1]",
        "        string match -q -- '-*' $w; and continue",
        '        contains -- "$p $w" $__devyard_paths; and set p "$p $w"',
        "    end",
        "    echo $p",
        "end",
    ]
    for path, words in paths.items():
        condition = f'"test (__devyard_path) = {_quote(path)}"'
        lines.append(f"complete -c devyard -n {condition} -a {_quote(' '.join(words))}")
    return "\n".join(lines) + "\n"


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    paths = table(parser)
    return {"bash": _bash, "zsh": _zsh, "fish": _fish}[shell](paths)
