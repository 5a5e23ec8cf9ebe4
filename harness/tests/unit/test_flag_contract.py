"""The checked-in SGLang flag table is what the pinned sglang really registers.

Reads the files of sglang==SGLANG_VERSION as the dev virtualenv installs it (no deps, never
imported; hack/install-python-deps.sh --extras dev), so no download and no cache: without
it those tests skip locally and fail under CI=true. The extractor itself is also tested on
small synthetic sources.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from sparkllm.errors import SpecError
from sparkllm.sglang_contract.flags import (
    SGLANG_VERSION,
    FlagSpec,
    FlagTable,
    flag_spec,
    flag_table,
    known_flags,
)
from sparkllm_dev.ci import unavailable
from sparkllm_dev.flags.extract import extract_flags, read_installed_sources

# Every flag the operator renders or relies on (DESIGN.md), spelled as in 0.5.23.
OPERATOR_FLAGS = (
    "--model-path",
    "--served-model-name",
    "--nnodes",
    "--node-rank",
    "--dist-init-addr",
    "--dist-timeout",
    "--pp-size",
    "--tp-size",
    "--mem-fraction-static",
    "--context-length",
    "--chunked-prefill-size",
    "--cuda-graph-max-bs-decode",
    "--max-running-requests",
    "--max-queued-requests",
    "--watchdog-timeout",
    "--host",
    "--port",
    "--enable-metrics",
    "--api-key",
    "--trust-remote-code",
    "--tool-call-parser",
    "--reasoning-parser",
)


@pytest.fixture(scope="session")
def sglang_sources() -> dict[str, str]:
    try:
        return read_installed_sources(SGLANG_VERSION)
    except SpecError as exc:
        unavailable(f"sglang sources not available (required under CI): {exc}")


def test_checked_in_table_equals_fresh_extraction(sglang_sources: dict[str, str]) -> None:
    packaged = resources.files("sparkllm.sglang_contract").joinpath("sglang_flags.json").read_text()
    fresh = extract_flags(sglang_sources).to_json()
    assert json.loads(packaged) == fresh, "run hack/update-sglang-flags.sh and commit the json"


def test_sources_are_the_pinned_version(sglang_sources: dict[str, str]) -> None:
    assert f"sglang-{SGLANG_VERSION}.dist-info/METADATA" in sglang_sources
    assert extract_flags(sglang_sources).sglang_version == SGLANG_VERSION


@pytest.mark.parametrize("flag", OPERATOR_FLAGS)
def test_operator_flag_exists_in_pinned_sglang(flag: str) -> None:
    assert flag in known_flags()
    assert flag_spec(flag).name == flag, f"{flag} is only an alias in {SGLANG_VERSION}"


def test_old_cuda_graph_flag_is_gone() -> None:
    assert "--cuda-graph-max-bs" not in known_flags()
    assert flag_spec("--cuda-graph-max-bs-decode").value_type == "int"


@pytest.mark.parametrize(
    ("flag", "choice"),
    [("--tool-call-parser", "deepseekv4"), ("--reasoning-parser", "deepseek-v4")],
)
def test_deepseek_v4_parsers_are_accepted(flag: str, choice: str) -> None:
    choices = flag_spec(flag).choices
    assert choices is not None
    assert choice in choices
    assert "auto" in choices


def test_defaults_the_operator_relies_on() -> None:
    table = flag_table()
    assert table.field_defaults["host"] == "127.0.0.1"
    assert table.field_defaults["port"] == 30000
    assert table.field_defaults["watchdog_timeout"] == 300
    assert table.field_defaults["dist_timeout"] is None
    assert flag_spec("--model-path").required


def test_table_round_trips_through_json() -> None:
    table = flag_table()
    assert FlagTable.from_json(table.to_json()) == table


SYNTHETIC_FIELDS = """
import argparse
from typing import List, Literal, Optional
import msgspec
from sglang.srt.arg_groups.arg_utils import A, Arg
from sglang.srt.arg_groups.choices import COLOURS

class Parallel(msgspec.Struct):
    _NS_PATH = "parallel"
    pp_size: A[int, Arg(help="PP.", aliases=["--pipeline-parallel-size"])] = 1
    model_path: A[str, Arg(help="Path.", aliases=["--model"])]
    ep_offset: A[int, Arg(help="x", cli_name="--elastic-offset")] = 2 * 3
    hidden: A[bool, Arg(no_cli=True)] = False
    enable_x: A[bool, "Enable x."] = True
    mode: A[Literal["a", "b"], "Mode."] = "a"
    colour: A[Optional[str], Arg(help="c", choices=COLOURS + ["blue"])] = None
    sizes: A[Optional[List[int]], "Sizes."] = None
    replicate: A[Optional[bool], Arg(help="r", action=argparse.BooleanOptionalAction)] = None
    old_mode: A[bool, "(Deprecated, use --mode) Old."] = False
    plain: int = 5

class NotInput(msgspec.Struct):
    _NS_PATH = "other"
    ignored: A[int, "Not collected."] = 1
"""

SYNTHETIC_SERVER_ARGS = """
from sglang.srt.arg_groups.argparse_actions import DeprecatedStoreTrueAction
_INPUT_NAMESPACES = [Parallel]
NAMES = ["p", "q"]

def _names():
    return list(NAMES)

class ServerArgs:
    @staticmethod
    def add_cli_args(parser):
        names = _names()
        parser.add_argument("--parser-name", type=str, choices=["auto"] + names,
                            default=_declared_default("plain"))
        parser.add_argument("--old-switch", action=DeprecatedStoreTrueAction,
                            new_flag="--enable-x", help="Deprecated.")
"""

SYNTHETIC_ACTIONS = """
import argparse
class DeprecatedStoreTrueAction(argparse.Action):
    def __init__(self, option_strings, dest, new_flag=None, nargs=0, const=True, default=False):
        super().__init__(option_strings, dest, nargs=nargs)
"""


@pytest.fixture(scope="module")
def synthetic() -> FlagTable:
    return extract_flags(
        {
            "sglang/_version.py": "__version__ = version = '9.9.9'\n",
            "sglang/srt/server_args.py": SYNTHETIC_SERVER_ARGS,
            "sglang/srt/arg_groups/fields/parallel.py": SYNTHETIC_FIELDS,
            "sglang/srt/arg_groups/argparse_actions.py": SYNTHETIC_ACTIONS,
            "sglang/srt/arg_groups/choices.py": 'COLOURS = ["red", "green"]\n',
        }
    )


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("--pp-size", {"aliases": ("--pipeline-parallel-size",), "dest": "pp_size", "default": 1}),
        ("--model-path", {"aliases": ("--model",), "required": True, "has_default": False}),
        ("--elastic-offset", {"dest": "ep_offset", "default": 6, "value_type": "int"}),
        ("--enable-x", {"takes_value": False, "const": True, "default": True}),
        ("--mode", {"choices": ("a", "b"), "takes_value": True}),
        ("--colour", {"choices": ("red", "green", "blue")}),
        ("--sizes", {"nargs": "+", "value_type": "int"}),
        ("--replicate", {"takes_value": False, "negations": ("--no-replicate",)}),
        ("--old-mode", {"deprecated": True, "replacement": "--mode"}),
        ("--parser-name", {"choices": ("auto", "p", "q"), "default": 5, "dest": "parser_name"}),
        ("--old-switch", {"takes_value": False, "deprecated": True, "replacement": "--enable-x"}),
    ],
)
def test_extractor_mirrors_arg_utils(
    synthetic: FlagTable, name: str, expected: dict[str, object]
) -> None:
    spec = synthetic.by_spelling[name]
    for attribute, value in expected.items():
        assert getattr(spec, attribute) == value, attribute


def test_extractor_skips_no_cli_plain_and_foreign_namespaces(synthetic: FlagTable) -> None:
    names = {spec.name for spec in synthetic.flags}
    assert "--hidden" not in names
    assert "--plain" not in names
    assert "--ignored" not in names
    assert synthetic.field_defaults["plain"] == 5
    assert synthetic.sglang_version == "9.9.9"


def test_extractor_needs_server_args() -> None:
    with pytest.raises(SpecError, match=r"server_args\.py"):
        extract_flags({"sglang/_version.py": "__version__ = '1'\n"})


def test_flag_spec_json_round_trip() -> None:
    spec = FlagSpec(name="--x", dest="x", takes_value=True, source="s.py", choices=("a",))
    assert FlagSpec.from_json(spec.to_json()) == spec
