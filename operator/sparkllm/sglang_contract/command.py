"""The SGLang command line of one rank, built from the field table and checked against SGLang.

Every word comes from a row of :data:`~sparkllm.sglang_contract.fields.LAUNCH_FIELDS`,
in its order, and every flag must exist in the pinned SGLang's flag table
(``sglang_flags.json``, extracted from the wheel); :func:`engine_args` asserts it. The
layer partition has no flag in SGLang — it is the env ``SGLANG_PP_LAYER_PARTITION``
(``render/engine.py`` sets the environment).

The engine API key never appears on a command line: not in the pod spec, not in
``/proc/<pid>/cmdline`` of the rank's process. Rank 0's env holds it
(``SPARKLLM_ENGINE_API_KEY``, from a secretKeyRef) and :data:`ENGINE_LAUNCHER_CODE` moves it
from the environment into SGLang's ``sys.argv`` inside the process (SGLang 0.5.23 takes the
key only as ``--api-key``; it reads no variable or file for it). It is one word,
``--api-key=<key>``, because the key is a Secret's value, possibly a user's, that may
start with "-", which argparse would read as an option if it stood alone
(:mod:`sparkllm.sglang_contract.argv`). Every other value here is the operator's own or
constrained by the API so that it cannot start with "-" (paths are absolute, served names
start with a letter or digit, parsers are enums); ``extraArgs`` are the user's own argv
words, checked as SGLang would parse them.

The command is not ``python3 -m sglang.launch_server`` but ``python3 -c`` with
:data:`ENGINE_LAUNCHER_CODE`, which adds the key, keeps it out of the rank's log and then
runs that very module; :func:`launched_args` says what SGLang's argparse then reads.

Pure: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Final

from sparkllm.errors import SpecError
from sparkllm.sglang_contract.argv import attached, flag_name
from sparkllm.sglang_contract.fields import (
    ENGINE_API_KEY_ENV,
    LAUNCH_FIELDS,
    OPERATOR_OWNED_FLAGS,
    LaunchField,
    LaunchValue,
    RankLaunch,
)
from sparkllm.sglang_contract.flags import flag_spec, known_flags, validate_extra_args
from sparkllm.sglang_contract.guarded import mirrored_settings

if TYPE_CHECKING:
    from sparkllm.api.spec import InferenceClusterSpec

ENGINE_LOGGER: Final = "sglang.srt.entrypoints.engine"
"""The logger (``__name__`` of ``srt/entrypoints/engine.py``) that logs ``server_args=``."""
SERVER_ARGS_LOG_PREFIX: Final = "server_args="

ENGINE_LAUNCHER_CODE: Final = (
    f"import logging,os,runpy,sys;k=os.environ.pop({ENGINE_API_KEY_ENV!r},None);"
    "sys.argv+=[] if k is None else ['--api-key='+k];"
    f"logging.getLogger({ENGINE_LOGGER!r}).addFilter("
    f"lambda r:not str(r.msg).startswith({SERVER_ARGS_LOG_PREFIX!r}));"
    "runpy.run_module('sglang.launch_server',run_name='__main__',alter_sys=True)"
)
"""``python3 -c`` code: add the engine key from the environment, drop SGLang's
``server_args=`` start-up line, then run SGLang.

The key: popped from ``SPARKLLM_ENGINE_API_KEY`` (so SGLang's spawned processes do not
inherit it) and appended to ``sys.argv`` as one ``--api-key=<key>`` word, where SGLang's
argparse reads it; the kernel's copy of the command line (``/proc/<pid>/cmdline``, what
``ps`` shows) is the one the kubelet started, without it. Ranks > 0 have no such variable
and get no key. :func:`launched_args` is the same step as a pure function (the simulator
runs it); ``tests/unit/test_engine_log_filter.py`` runs this code and compares.

The log line: SGLang 0.5.23 logs ``server_args={...}`` at INFO when a rank starts (the
main process, ``Engine._launch_subprocesses`` in ``srt/entrypoints/engine.py``), redacting
only the watermark fields, so rank 0's engine API key would be in its log for anyone who
may read pod logs (docs/gateway.md, "Engine key"). A filter on that one logger drops that
one line and nothing else (``--log-level warning`` would drop every INFO line); it
survives SGLang's ``logging.basicConfig(force=True)``, which replaces only the root's
handlers, and needs no file in the image. SGLang's other processes (scheduler,
detokenizer) are spawned and never log ``server_args``, so they need no filter.
``str(r.msg)`` rather than ``r.getMessage()``: a filter that raised would break the log
call itself.

``runpy.run_module(..., run_name="__main__", alter_sys=True)`` is what ``-m`` does: the
module runs as ``__main__`` with ``sys.argv[0]`` its file and ``sys.argv[1:]`` the args,
and ``__main__.__spec__`` names ``sglang.launch_server``, so multiprocessing's spawned
children import it as ``-m`` would have them. Every rank runs it (ranks > 0 log the line
too, without a key). ``tests/unit/test_engine_log_filter.py`` runs it against the logger
and message read from the pinned wheel.
"""

ENGINE_COMMAND: Final = ("python3", "-c", ENGINE_LAUNCHER_CODE)


def argv_word(value: LaunchValue) -> str:
    """A value exactly as SGLang's argparse will read it back (0.57, not 0.5699...).

    For a float, ``repr`` is the shortest string that round-trips; a fixed precision would
    round (0.123456789 -> 0.123457) and SGLang would run with another value than the spec's.
    """
    if isinstance(value, float):
        return repr(value)
    return str(value)


def field_words(field: LaunchField, value: LaunchValue) -> list[str]:
    """The argv words that set ``field`` to ``value``."""
    if not flag_spec(field.flag).takes_value:
        return [field.flag]
    return [field.flag, argv_word(value)]


def launched_args(args: Sequence[str], environ: Mapping[str, str]) -> list[str]:
    """SGLang's arguments once :data:`ENGINE_LAUNCHER_CODE` ran with ``environ``: the
    rendered ``args``, then ``--api-key=<key>`` (one word: the key may start with "-")
    when the engine key's variable is set."""
    key = environ.get(ENGINE_API_KEY_ENV)
    return [*args] if key is None else [*args, attached("--api-key", key)]


def engine_args(spec: InferenceClusterSpec, *, rank: int, rank0_ip: str) -> list[str]:
    """SGLang's arguments for ``rank`` (they follow :data:`ENGINE_COMMAND`); never a key."""
    launch = RankLaunch(rank=rank, rank0_address=rank0_ip)
    args: list[str] = []
    for field in LAUNCH_FIELDS:
        value = field.value(spec, launch)
        if value is not None:
            args += field_words(field, value)
    names = {name for name in map(flag_name, args) if name is not None}
    unknown = sorted(names - known_flags())
    if unknown:  # a programming error, but never ship a command SGLang would refuse
        raise SpecError(f"rendered SGLang flags unknown to the pinned SGLang: {unknown}")
    reserved = [flag for flag in OPERATOR_OWNED_FLAGS if flag in known_flags()]
    problems = validate_extra_args(spec.engine.extra_args, reserved=reserved)
    if problems:
        raise SpecError("spec.engine.extraArgs: " + "; ".join(problems))
    mirrored_settings(spec.engine.extra_args)  # the front door's copy must be usable too
    return args + list(spec.engine.extra_args)


__all__ = [
    "ENGINE_COMMAND",
    "ENGINE_LAUNCHER_CODE",
    "ENGINE_LOGGER",
    "SERVER_ARGS_LOG_PREFIX",
    "argv_word",
    "engine_args",
    "field_words",
    "launched_args",
]
