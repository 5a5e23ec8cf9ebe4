"""Command-line words: ``--flag value`` and ``--flag=value``, read and written in one place.

Why a value is sometimes attached with "=": a value the operator does not choose itself
may begin with "-". The engine API key is one: a user's Secret
(``spec.engine.apiKeySecretRef``) holds whatever the user put there, and the kubelet
substitutes it for ``$(SPARKLLM_ENGINE_API_KEY)`` only when the container starts. As a
separate word, ``-abc`` is read by Python's argparse — SGLang's ``launch_server``, smg's
``launch``, and the simulator's model of both — as an option, and the process exits with
"argument --api-key: expected one argument". Attached, the value is part of the option's
own word: argparse splits that word on its first "=" and takes the rest verbatim,
whatever it starts with (an "=" inside it included; the one value no form carries is
exactly ``--``, which Python 3.11's argparse drops). The kubelet expands
``$(VAR)`` inside a larger word, so ``--api-key=$(SPARKLLM_ENGINE_API_KEY)`` is still
one word after expansion. :func:`attached` renders that form.

Why readers live here too: once a rendered command line holds both forms, everything
that reads one — the contract's own check that every emitted flag exists, the dev
cluster's rewrite of the router's ports, tests — must find a flag and its value in
either form. :func:`flag_name`, :func:`option_value` and :func:`replace_option_values`
do, the way argparse does (the last occurrence wins). They match exact spellings only;
argparse's abbreviations are :mod:`sparkllm.sglang_contract.flags`' business, where the
whole SGLang table is known. (smg's ``launch`` is argparse too, so the gateway's router
command uses the same helpers.)

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from sparkllm.errors import SpecError

OPTION_PREFIX: Final = "--"


def attached(flag: str, value: str) -> str:
    """``--flag=value`` as one word: the form for a value that may start with "-".

    Raises SpecError (a programming error) when ``flag`` is not a long option name.
    """
    if not flag.startswith(OPTION_PREFIX) or flag == OPTION_PREFIX or "=" in flag:
        raise SpecError(f"not a long option name: {flag!r}")
    return f"{flag}={value}"


def flag_name(word: str) -> str | None:
    """The long option a word names (``--port`` for ``--port`` and ``--port=1``); None for
    a word that is not one (a value, or the bare ``--`` separator)."""
    if not word.startswith(OPTION_PREFIX) or word == OPTION_PREFIX:
        return None
    return word.split("=", 1)[0]


def option_value(words: Sequence[str], flag: str) -> str | None:
    """The value of ``flag`` (``--flag VALUE`` or ``--flag=VALUE``); the last one when
    repeated, as argparse keeps it; None when absent or given no value."""
    found: str | None = None
    index = 0
    while index < len(words):
        word = words[index]
        if word == flag and index + 1 < len(words):
            found = words[index + 1]
            index += 2  # a value is never itself read as a flag
            continue
        if flag_name(word) == flag and "=" in word:
            found = word.split("=", 1)[1]
        index += 1
    return found


def replace_option_values(words: Sequence[str], values: Mapping[str, str]) -> list[str]:
    """``words`` with the value of every flag named in ``values`` replaced, each in the
    form it was written (``--flag=VALUE`` stays one word, ``--flag VALUE`` two).

    ``values`` must name options that take a value: the word after a bare ``--flag`` is
    its value. A flag that is absent, or last with no value, is left as it is.
    """
    out: list[str] = []
    index = 0
    while index < len(words):
        word = words[index]
        name = flag_name(word)
        if name is not None and name in values:
            if "=" in word:
                out.append(attached(name, values[name]))
                index += 1
                continue
            if index + 1 < len(words):
                out += [word, values[name]]
                index += 2
                continue
        out.append(word)
        index += 1
    return out


__all__ = ["attached", "flag_name", "option_value", "replace_option_values"]
