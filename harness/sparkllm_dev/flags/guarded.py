"""Which SGLang settings change the prompt, open a listener, log prompts or hold a secret.

Why derived from the wheel's code: the front door counts every prompt exactly as the
engine renders it, so any engine setting that changes the rendered prompt (a chat
template, default template kwargs, the tokenizer, the parsers...) must either be told
to the gateway or refused in ``extraArgs``; the same for settings that open another
listener on the node's address, write prompts to logs or files, or put a secret into
the pod spec. A hand-kept list would miss the next SGLang's new field. So the list is
what the pinned wheel's own code reads: ``extract_guarded`` walks the named functions
and files with ``ast`` (never importing sglang, which pulls in torch) and collects every
ServerArgs field they read, however they read it in 0.5.23:

- ``server_args.x`` / ``self.server_args.x`` (any name ending in ``server_args``);
- the resolved namespace bags, ``get_serving().x``, ``get_model().x``,
  ``get_exec().moe.x`` (``get_<namespace>()``, ``get_server_args()``,
  ``resolving_view(...)``), also through a local name bound to one of them;
- ``self.tokenizer_manager.config_value("x")`` and ``config_leaf("x")``;
- ``getattr(<one of the above>, "x", ...)``.

Only names that are ServerArgs fields of the pinned flag table count. Each class is a
set of probes (:class:`Probe`: a file, one function of it, or only the arguments of the
calls to one callee in it); ``listener`` adds every option whose field is a port (on the
host network every port is a port of the node). ``hack/update-sglang-flags.sh`` writes
the result next to the flag table (``guarded_fields.json``); the product's decision per
field is :mod:`sparkllm.sglang_contract.guarded`, and the tests fail when the two
disagree or the wheel's code reads a field the table does not hold.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from sparkllm.errors import SpecError
from sparkllm.sglang_contract import guarded
from sparkllm.sglang_contract.flags import FlagTable, flag_table
from sparkllm_dev.flags.extract import wheel_command
from sparkllm_dev.flags.source_literals import dotted_name

_SRT: Final = "sglang/srt/"
_SERVING_CHAT: Final = _SRT + "entrypoints/openai/serving_chat.py"
_TOKENIZER_MANAGER: Final = _SRT + "managers/tokenizer_manager.py"
_HTTP_SERVER: Final = _SRT + "entrypoints/http_server.py"
# The namespace bags of runtime_context (get_serving(), get_model(), ...) and the two
# other ways 0.5.23 hands out ServerArgs: the raw object and a resolving view of it.
_ACCESSOR_CALLS: Final = frozenset(
    {"get_server_args", "resolving_view", "get_parallel"}
    | {f"get_{namespace}" for namespace in ("device", "model", "exec", "schedule", "memory")}
    | {f"get_{namespace}" for namespace in ("spec", "lora", "mm", "disagg", "serving")}
    | {"get_observability"}
)
_LEAF_READERS: Final = frozenset({"config_value", "config_leaf"})
_PORT_FIELD: Final = re.compile(r"(^|_)ports?$")
_ENV_PREFIX: Final = "SGLANG_"
HOOKS_GLOB: Final = _SRT + "arg_groups/*_hook.py"
_RESOLVE: Final = "declare_resolution"
_ENV_READERS: Final = frozenset({"getenv", "get_bool_env_var", "get_int_env_var"})


@dataclass(frozen=True, slots=True)
class Probe:
    """Where to look: a wheel file, one function of it, or the arguments of one call."""

    path: str
    function: str | None = None
    """``Class.method`` or ``function``; None: the whole file."""
    call: str | None = None
    """Only the arguments of calls whose callee's last name is this (``RequestLogger``)."""
    assigns: str | None = None
    """Only the values assigned to this attribute (``self.crash_dump_folder = ...``)."""

    def describe(self) -> str:
        where = self.path.removeprefix(_SRT)
        if self.function is not None:
            where += f" {self.function}"
        if self.call is not None:
            where += f" (arguments of {self.call}(...))"
        if self.assigns is not None:
            where += f" (values assigned to .{self.assigns})"
        return where


# What builds the prompt the engine counts: the chat and completion handlers, the chat
# encoders (DeepSeek's recipe adapter), the template manager and the template the HTTP
# server hands it at boot, the tokenizer manager's tokenizer and tokenising, and the
# model config (its architecture picks the chat encoder, e.g. DeepSeek V4's).
PROMPT_PROBES: Final = (
    Probe(_SERVING_CHAT),
    Probe(_SRT + "entrypoints/openai/serving_base.py"),
    Probe(_SRT + "entrypoints/openai/serving_completions.py"),
    Probe(_SRT + "entrypoints/openai/serving_deepseek_recipe.py"),
    Probe(_SRT + "entrypoints/openai/chat_encoding.py"),
    Probe(_SRT + "entrypoints/openai/chat_encoding_adapters.py"),
    Probe(_SRT + "parser/template_manager.py"),
    Probe(_SRT + "parser/template_detection.py"),
    Probe(_SRT + "parser/jinja_template_utils.py"),
    Probe(_HTTP_SERVER, call="initialize_templates"),
    Probe(_TOKENIZER_MANAGER, "TokenizerManager.init_tokenizer_and_processor"),
    Probe(_TOKENIZER_MANAGER, "get_processor_wrapper"),
    Probe(_TOKENIZER_MANAGER, "TokenizerManager._tokenize_one_request"),
    Probe(_TOKENIZER_MANAGER, "TokenizerManager._validate_one_request"),
    Probe(_SRT + "configs/model_config.py", "ModelConfig.from_server_args"),
)
# What writes requests (prompts) to the log or to files: the request logger and the
# folder the tokenizer manager dumps requests to before a crash.
LOG_PROBES: Final = (
    Probe(_TOKENIZER_MANAGER, "TokenizerManager.init_request_logging_and_dumping"),
    Probe(_TOKENIZER_MANAGER, "TokenizerManager.__init__", assigns="crash_dump_folder"),
)
# What holds a credential: the keys the auth middleware checks, the TLS key's password
# the HTTP servers are given.
SECRET_PROBES: Final = (
    Probe(_HTTP_SERVER, call="add_api_key_middleware"),
    Probe(_HTTP_SERVER, call="_run_granian_server"),
)
# What opens a listener besides the engine's HTTP port: the choice of server
# (launch_server.run_server: the legacy gRPC server instead of HTTP), the native gRPC
# server; plus every port field (below).
LISTENER_PROBES: Final = (
    Probe("sglang/launch_server.py", "run_server"),
    Probe(_HTTP_SERVER, call="_start_native_grpc_server_for_runtime"),
)
# The secret probe's second call also passes host/port/log settings: only fields whose
# name says they are a credential count from it.
_SECRET_NAME: Final = re.compile(r"(^|_)(api_key|password|secret|key_b?)$")

PROBES: Final = {
    "prompt": PROMPT_PROBES,
    "log": LOG_PROBES,
    "secret": SECRET_PROBES,
    "listener": LISTENER_PROBES,
}


def source_paths() -> frozenset[str]:
    """The wheel files the probes read."""
    return frozenset(probe.path for probes in PROBES.values() for probe in probes)


def source_patterns() -> tuple[str, ...]:
    """What to read from the wheel: the probed files and the arg-group hooks."""
    return (*sorted(source_paths()), HOOKS_GLOB)


def _qualified_functions(tree: ast.Module) -> Iterator[tuple[str, ast.AST]]:
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            yield node.name, node
        elif isinstance(node, ast.ClassDef):
            for item in node.body:
                if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef):
                    yield f"{node.name}.{item.name}", item


def _last_name(node: ast.expr) -> str:
    """``c`` for ``a.b.c`` (a callee's own name)."""
    return dotted_name(node).rsplit(".", 1)[-1]


class _Reads:
    """The ServerArgs fields an AST region reads, through 0.5.23's accessors."""

    def __init__(self, fields: frozenset[str]) -> None:
        self.fields = fields

    def _is_accessor(self, node: ast.expr, aliases: frozenset[str]) -> bool:
        if isinstance(node, ast.Name):
            return node.id.endswith("server_args") or node.id in aliases
        if isinstance(node, ast.Attribute):
            return node.attr.endswith("server_args") or self._is_accessor(node.value, aliases)
        if isinstance(node, ast.Call):
            return _last_name(node.func) in _ACCESSOR_CALLS
        return False

    def aliases(self, region: ast.AST) -> frozenset[str]:
        """Local names bound to an accessor (``serving = get_serving()``)."""
        names: set[str] = set()
        for node in ast.walk(region):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name) and self._is_accessor(node.value, frozenset()):
                    names.add(target.id)
        return frozenset(names)

    def of(self, region: ast.AST, aliases: frozenset[str] | None = None) -> set[str]:
        """Fields (``name``) and environment variables (``$NAME``) read in ``region``."""
        aliases = self.aliases(region) if aliases is None else aliases
        found: set[str] = set()
        for node in ast.walk(region):
            name: str | None = None
            if isinstance(node, ast.Attribute) and node.attr in self.fields:
                if self._is_accessor(node.value, aliases):
                    name = node.attr
            elif isinstance(node, ast.Call) and node.args:
                callee = _last_name(node.func)
                key = node.args[0] if callee in _LEAF_READERS else None
                if callee == "getattr" and len(node.args) >= 2:
                    owner = node.args[0]
                    key = node.args[1] if self._is_accessor(owner, aliases) else None
                if isinstance(key, ast.Constant) and isinstance(key.value, str):
                    name = key.value if key.value in self.fields else None
            variable = _environment_variable(node)
            if variable is not None:
                name = "$" + variable
            if name is not None:
                found.add(name)
        for assigned, value in self.env_aliases(region).items():
            if any(isinstance(n, ast.Name) and n.id == assigned for n in ast.walk(region)):
                found.add("$" + value)
        return found

    def env_aliases(self, region: ast.AST) -> dict[str, str]:
        """Local names bound to an environment read (``port = envs.SGLANG_X.get()``)."""
        bound: dict[str, str] = {}
        for node in ast.walk(region):
            if isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                variables = [_environment_variable(n) for n in ast.walk(node.value)]
                named = [v for v in variables if v is not None]
                if isinstance(target, ast.Name) and len(named) == 1:
                    bound[target.id] = named[0]
        return bound


def _environment_variable(node: ast.AST) -> str | None:
    """``SGLANG_X`` for ``envs.SGLANG_X`` or a call reading ``"SGLANG_X"`` from the env."""
    if isinstance(node, ast.Attribute) and node.attr.startswith(_ENV_PREFIX):
        return node.attr if dotted_name(node.value).endswith("envs") else None
    if isinstance(node, ast.Call) and _last_name(node.func) in _ENV_READERS and node.args:
        key = node.args[0]
        if isinstance(key, ast.Constant) and str(key.value).startswith(_ENV_PREFIX):
            return str(key.value)
    return None


def _probe_reads(probe: Probe, tree: ast.Module, reads: _Reads) -> set[str]:
    region: ast.AST = tree
    if probe.function is not None:
        functions = dict(_qualified_functions(tree))
        if probe.function not in functions:
            raise SpecError(f"{probe.describe()}: no such function in the wheel")
        region = functions[probe.function]
    if probe.call is None and probe.assigns is None:
        return reads.of(region)
    aliases = reads.aliases(region)
    parts: list[ast.AST] = []
    for node in ast.walk(region):
        if isinstance(node, ast.Call) and _last_name(node.func) == probe.call:
            parts += [*node.args, *(keyword.value for keyword in node.keywords)]
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Attribute) and t.attr == probe.assigns for t in node.targets
        ):
            parts.append(node.value)
    if not parts:
        raise SpecError(f"{probe.describe()}: no such call or assignment in the wheel")
    return set().union(*(reads.of(part, aliases) for part in parts))


def _env_fallbacks(trees: Mapping[str, ast.Module], reads: _Reads) -> dict[str, set[str]]:
    """Field -> the environment variables SGLang resolves it from when the flag is unset.

    0.5.23 writes such a fallback in its arg-group hooks as
    ``declare_resolution(server_args, "<hook>", <field>=<an env read>)``
    (``grpc_port`` from ``SGLANG_GRPC_PORT``); the variable then sets the field.
    """
    fallbacks: dict[str, set[str]] = {}
    for path, tree in trees.items():
        if not fnmatch.fnmatch(path, HOOKS_GLOB):
            continue
        for _, function in _qualified_functions(tree):
            bound = reads.env_aliases(function)
            for node in ast.walk(function):
                if not (isinstance(node, ast.Call) and _last_name(node.func) == _RESOLVE):
                    continue
                for keyword in node.keywords:
                    variables = {
                        v for n in ast.walk(keyword.value) if (v := _environment_variable(n))
                    }
                    if isinstance(keyword.value, ast.Name) and keyword.value.id in bound:
                        variables.add(bound[keyword.value.id])
                    if keyword.arg is not None and variables:
                        fallbacks.setdefault(keyword.arg, set()).update(variables)
    return fallbacks


def extract_guarded(sources: Mapping[str, str], table: FlagTable) -> dict[str, Any]:
    """The classes of guarded settings of the given wheel files, each as sorted lists.

    Per class: ``flags`` (the ServerArgs fields a command-line option sets) and ``env``
    (the ``SGLANG_*`` variables the probed code reads, and those SGLang resolves one of
    the class's fields from). ``sources`` maps wheel paths to text (at least the probed
    files and the arg-group hooks); ``table`` is the same wheel's flag table. Raises
    SpecError when a probed file, function or call is gone (the probes must then be
    revisited for the new SGLang).
    """
    fields = frozenset(spec.dest for spec in table.flags) | frozenset(table.field_defaults)
    flagged = frozenset(spec.dest for spec in table.flags)
    reads = _Reads(fields)
    trees = {
        path: ast.parse(text, path)
        for path, text in sources.items()
        if path in source_paths() or fnmatch.fnmatch(path, HOOKS_GLOB)
    }
    fallbacks = _env_fallbacks(trees, reads)
    classes: dict[str, dict[str, list[str]]] = {}
    for name, probes in PROBES.items():
        found: set[str] = set()
        for probe in probes:
            if probe.path not in trees:
                raise SpecError(f"{probe.path} is missing from the sources")
            probed = _probe_reads(probe, trees[probe.path], reads)
            if name == "secret":
                probed = {field for field in probed if _SECRET_NAME.search(field)}
            found |= probed
        if name == "listener":
            found |= {field for field in flagged if _PORT_FIELD.search(field)}
        env = {read[1:] for read in found if read.startswith("$")}
        for field in found & fields:
            env |= fallbacks.get(field, set())
        classes[name] = {"flags": sorted(found & flagged), "env": sorted(env)}
    return {
        "sglang_version": table.sglang_version,
        "probes": {name: [p.describe() for p in probes] for name, probes in PROBES.items()},
        "classes": classes,
    }


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m sparkllm_dev.flags.guarded [WHEEL] [--output JSON]``.

    Reads the wheel (default: the installed sglang) and the flag table next to the
    product module (run ``sparkllm_dev.flags.extract`` first when the pin moves).
    """
    sources, output = wheel_command(
        "python -m sparkllm_dev.flags.guarded",
        argv,
        default_output=Path(guarded.__file__).with_name(guarded.GUARDED_RESOURCE),
        patterns=source_patterns(),
    )
    extracted = extract_guarded(sources, flag_table())
    output.write_text(json.dumps(extracted, indent=1) + "\n", encoding="utf-8")
    counts = {name: len(c["flags"]) + len(c["env"]) for name, c in extracted["classes"].items()}
    print(f"sglang {extracted['sglang_version']}: guarded settings {counts} -> {output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
