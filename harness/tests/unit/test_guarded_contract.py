"""The checked-in guarded settings are what the pinned wheel's code reads.

``guarded_fields.json`` lists the SGLang settings that change the prompt the engine
renders, log prompts, hold secrets or open listeners, as ``sparkllm_dev.flags.guarded``
derives them from the wheel's own code. Re-derived here from the sglang the dev
virtualenv installs (never imported): a new SGLang that reads another field on the
prompt path, or stops reading one, fails this test until the table is regenerated
(hack/update-sglang-flags.sh) and the product decides about it
(tests/unit/test_sglang_guarded.py). The extractor's reading rules are also tested on
small synthetic sources, so each way 0.5.23 reads a setting is pinned.
"""

from __future__ import annotations

import json
from importlib import resources

import pytest

from sparkllm.errors import SpecError
from sparkllm.sglang_contract.flags import SGLANG_VERSION, FlagSpec, FlagTable, flag_table
from sparkllm.sglang_contract.guarded import GUARDED_RESOURCE
from sparkllm_dev.ci import unavailable
from sparkllm_dev.flags import guarded
from sparkllm_dev.flags.extract import read_installed_sources


@pytest.fixture(scope="module")
def wheel_sources() -> dict[str, str]:
    try:
        return read_installed_sources(SGLANG_VERSION, guarded.source_patterns())
    except SpecError as exc:
        unavailable(f"sglang sources not available (required under CI): {exc}")


def test_checked_in_table_equals_fresh_extraction(wheel_sources: dict[str, str]) -> None:
    packaged = resources.files("sparkllm.sglang_contract").joinpath(GUARDED_RESOURCE).read_text()
    fresh = guarded.extract_guarded(wheel_sources, flag_table())
    assert json.loads(packaged) == fresh, "run hack/update-sglang-flags.sh and commit the json"


def test_the_issues_settings_are_found_in_their_class(wheel_sources: dict[str, str]) -> None:
    """Issue 25's examples, each found by reading the wheel (not typed into the table)."""
    classes = guarded.extract_guarded(wheel_sources, flag_table())["classes"]
    prompt = set(classes["prompt"]["flags"])
    assert {"default_chat_template_kwargs", "trust_request_chat_template"} <= prompt
    assert {"chat_template", "tokenizer_path", "hf_chat_template_name"} <= prompt
    assert {"tool_call_parser", "reasoning_parser"} <= prompt
    assert "log_requests" in classes["log"]["flags"]
    assert "grpc_port" in classes["listener"]["flags"]
    assert "SGLANG_GRPC_PORT" in classes["listener"]["env"]  # its env fallback
    assert "admin_api_key" in classes["secret"]["flags"]
    assert "SGLANG_DEFAULT_THINKING" in classes["prompt"]["env"]


def _table(*fields: str) -> FlagTable:
    flags = tuple(
        FlagSpec(name="--" + f.replace("_", "-"), dest=f, takes_value=True, source="x")
        for f in fields
    )
    return FlagTable(sglang_version="9.9.9", flags=flags)


SYNTHETIC_CHAT = """
class OpenAIServingChat:
    def __init__(self, tokenizer_manager):
        self.parser = self.tokenizer_manager.config_value("tool_call_parser")
        self.defaults = get_serving().default_chat_template_kwargs or {}
        self.bag = get_exec().moe.moe_runner
        self.other = get_processor().not_a_setting_reader

    def _validate(self, request):
        serving = get_serving()
        if serving.trust_request_chat_template:
            return None
        thinking = envs.SGLANG_DEFAULT_THINKING.get()
        return getattr(self.tokenizer_manager.server_args, "chat_template", None)
"""
SYNTHETIC_MANAGER = """
class TokenizerManager:
    def __init__(self, server_args):
        self.crash_dump_folder = get_observability().crash_dump_folder
        self.other = get_observability().enable_metrics

    def init_request_logging_and_dumping(self):
        self.logger = RequestLogger(log_requests=get_observability().log_requests)
"""
SYNTHETIC_HOOK = """
def handle_deprecated_args(server_args):
    port_env = envs.SGLANG_GRPC_PORT.get()
    if cfg.grpc_port is None and port_env is not None:
        declare_resolution(server_args, "_handle_deprecated_args", grpc_port=port_env)
"""


MANAGER = "TokenizerManager"


def test_each_way_of_reading_a_setting_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        guarded,
        "PROBES",
        {
            "prompt": (guarded.Probe("srt/chat.py"),),
            "log": (
                guarded.Probe("srt/manager.py", f"{MANAGER}.init_request_logging_and_dumping"),
                guarded.Probe("srt/manager.py", f"{MANAGER}.__init__", assigns="crash_dump_folder"),
            ),
            "secret": (),
            "listener": (),
        },
    )
    monkeypatch.setattr(guarded, "HOOKS_GLOB", "srt/*_hook.py")
    table = _table(
        "tool_call_parser", "default_chat_template_kwargs", "moe_runner",
        "trust_request_chat_template", "chat_template", "crash_dump_folder",
        "enable_metrics", "log_requests", "grpc_port", "not_a_setting_reader",
    )  # fmt: skip
    sources = {
        "srt/chat.py": SYNTHETIC_CHAT,
        "srt/manager.py": SYNTHETIC_MANAGER,
        "srt/serving_hook.py": SYNTHETIC_HOOK,
    }
    classes = guarded.extract_guarded(sources, table)["classes"]
    assert classes["prompt"] == {
        "flags": [
            "chat_template", "default_chat_template_kwargs", "moe_runner",
            "tool_call_parser", "trust_request_chat_template",
        ],
        "env": ["SGLANG_DEFAULT_THINKING"],
    }  # fmt: skip
    # only the value assigned to .crash_dump_folder, not every read of __init__
    assert classes["log"] == {"flags": ["crash_dump_folder", "log_requests"], "env": []}
    assert classes["listener"] == {"flags": ["grpc_port"], "env": ["SGLANG_GRPC_PORT"]}


def test_a_probe_whose_function_is_gone_fails_loudly(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(
        guarded, "PROBES", {"prompt": (guarded.Probe("srt/chat.py", "Gone.method"),)}
    )
    with pytest.raises(SpecError, match=r"Gone\.method: no such function"):
        guarded.extract_guarded({"srt/chat.py": SYNTHETIC_CHAT}, _table("chat_template"))
