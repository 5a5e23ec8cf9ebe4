"""Every engine setting that matters to the front door has a decision, and no decision is stale.

The settings come from ``guarded_fields.json``, extracted from the pinned wheel's code
(harness/tests/unit/test_guarded_contract.py re-derives it); the decisions are
``sparkllm.sglang_contract.guarded``'s. A setting the extraction finds but nobody
decided about (a new SGLang reads another field while it builds the prompt) fails here,
and so does a decision for a setting the wheel no longer reads.
"""

from __future__ import annotations

import pytest

from sparkllm.errors import SpecError
from sparkllm.sglang_contract.command import engine_args
from sparkllm.sglang_contract.fields import LAUNCH_FIELDS, REFUSED_FLAGS
from sparkllm.sglang_contract.flags import SGLANG_VERSION, flag_spec, flag_table, known_flags
from sparkllm.sglang_contract.guarded import (
    ENV_DECISIONS,
    FLAG_DECISIONS,
    GuardClass,
    Handling,
    flag_decision,
    guarded_table,
    mirrored_flags,
    mirrored_settings,
    owned_fields,
    refused_env,
    refused_flags,
)
from tests.unit.test_configcheck import ROOT, sample_spec


def _extracted_flags() -> set[str]:
    table = guarded_table()
    return {field for guard in GuardClass for field in table.flags[guard]}


def _extracted_env() -> set[str]:
    table = guarded_table()
    return {name for guard in GuardClass for name in table.env[guard]}


def test_the_table_is_for_the_pinned_sglang() -> None:
    assert guarded_table().sglang_version == SGLANG_VERSION


def test_every_extracted_flag_has_a_decision() -> None:
    undecided = sorted(_extracted_flags() - owned_fields() - set(FLAG_DECISIONS))
    assert not undecided, f"decide about these in sglang_contract/guarded.py: {undecided}"


def test_no_decision_is_stale() -> None:
    assert set(FLAG_DECISIONS) <= _extracted_flags()
    assert not set(FLAG_DECISIONS) & owned_fields(), "a spec field owns it: drop the decision"
    assert set(ENV_DECISIONS) == _extracted_env()


def test_every_allowed_setting_says_why() -> None:
    allowed = [d for d in (*FLAG_DECISIONS.values(), *ENV_DECISIONS.values())]
    assert all(d.why for d in allowed if d.handling is Handling.ALLOWED)


def test_the_issues_flags_are_mirrored_or_refused() -> None:
    """Issue 25: each flag it names is mirrored to the gateway or refused."""
    assert mirrored_flags() == {"--default-chat-template-kwargs": "default_chat_template_kwargs"}
    refused = {flag: r.guard for r in refused_flags() for flag in r.spellings}
    assert refused["--trust-request-chat-template"] is GuardClass.PROMPT
    assert refused["--chat-template"] is GuardClass.PROMPT
    assert refused["--tokenizer-path"] is GuardClass.PROMPT
    assert refused["--hf-chat-template-name"] is GuardClass.PROMPT
    assert refused["--log-requests"] is GuardClass.LOG
    assert refused["--grpc-port"] is GuardClass.LISTENER
    assert refused["--admin-api-key"] is GuardClass.SECRET
    env = {name: r.guard for r in refused_env() for name in r.spellings}
    assert env["SGLANG_DEFAULT_THINKING"] is GuardClass.PROMPT
    assert env["SGLANG_GRPC_PORT"] is GuardClass.LISTENER


def test_refusals_cover_every_spelling_and_only_refused_flags() -> None:
    refused = [flag for r in refused_flags() for flag in r.spellings]
    assert len(refused) == len(set(refused)), "a flag is refused under two classes"
    assert set(refused) <= known_flags()
    for flag in refused:
        decision = flag_decision(flag_spec(flag).dest)
        assert decision.handling is Handling.REFUSED, flag
        spec = flag_spec(flag)
        assert set(spec.spellings) <= set(refused), f"{flag}: an alias slips through"
    # the custom logit processor keeps its own rule and message (code on the engine)
    assert not set(REFUSED_FLAGS) & set(refused)


def test_owned_settings_are_the_launch_fields() -> None:
    """Owned: the prompt settings a spec field sets (the parsers, the window, the model)."""
    owned = {field.server_info_key for field in LAUNCH_FIELDS}
    assert owned_fields() == owned
    prompt = set(guarded_table().flags[GuardClass.PROMPT])
    assert {"tool_call_parser", "reasoning_parser", "context_length", "model_path"} <= (
        prompt & owned
    )


def test_a_mirrored_flag_reaches_the_engine_as_written_and_a_bad_one_is_invalid_spec() -> None:
    """The engine gets the user's words; a value the front door could not use is refused
    when rendering (the CEL rules cannot parse JSON), naming spec.engine.extraArgs."""
    args = ["--default-chat-template-kwargs", '{"thinking": true}']
    spec = sample_spec(extraArgs=args)
    assert engine_args(spec, rank=0, rank0_ip="10.0.0.1")[-2:] == args
    assert mirrored_settings(args) == {"default_chat_template_kwargs": '{"thinking":true}'}
    assert mirrored_settings(["--log-level", "debug"]) == {}
    # the last occurrence wins, as in SGLang's argparse
    twice = [*args, "--default-chat-template-kwargs={}"]
    assert mirrored_settings(twice) == {"default_chat_template_kwargs": "{}"}
    bad = sample_spec(extraArgs=["--default-chat-template-kwargs", '{"messages": []}'])
    with pytest.raises(SpecError, match=r"^spec\.engine\.extraArgs: .* may not set 'messages'"):
        engine_args(bad, rank=1, rank0_ip="10.0.0.1")


def test_api_docs_list_every_refused_setting() -> None:
    """docs/api.md's table says what the code does: every refused flag (canonical name)
    and variable, and the mirrored flag, appear in its section."""
    text = (ROOT / "docs" / "api.md").read_text(encoding="utf-8")
    section = text.split("## Engine settings the front door must know about", 1)[1]
    section = section.split("\n## ", 1)[0]
    specs = {spec.dest: spec for spec in flag_table().flags}
    refused = {
        specs[flag_spec(spelling).dest].name for r in refused_flags() for spelling in r.spellings
    }
    named = [*refused, *REFUSED_FLAGS, *mirrored_flags()]
    named += [name for r in refused_env() for name in r.spellings]
    missing = [name for name in named if f"`{name}`" not in section]
    assert not missing, f"docs/api.md does not list {missing}"
