"""What the pinned SGLang (0.5.23) exposes of the engine key, and what ranks > 0 serve.

docs/gateway.md ("Engine key") states these facts and reasons from them; here they are
read from the installed wheel's source (the dev venv holds it without its dependencies,
so it is read, not imported), so a new pin that changes them fails this test instead of
leaving the documentation wrong.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

from sparkllm.sglang_contract.fields import ENGINE_LISTEN_HOST


def _source(relative: str) -> str:
    spec = importlib.util.find_spec("sglang")  # finds the package without importing it
    assert spec is not None
    assert spec.submodule_search_locations
    return (Path(next(iter(spec.submodule_search_locations))) / relative).read_text("utf-8")


def _function(source: str, name: str) -> str:
    """The text of top-level function ``name`` (up to the next top-level statement)."""
    match = re.search(rf"^def {name}\(.*?(?=^\S)", source, flags=re.S | re.M)
    assert match is not None, name
    return match.group(0)


def test_the_start_up_log_line_carries_the_api_key() -> None:
    engine = _source("srt/entrypoints/engine.py")
    # logged at INFO by rank 0's main process, through a redaction of watermark fields only
    assert 'logger.info(f"server_args={_server_args_for_logging(server_args)}")' in engine
    assert "return redact_watermark_secrets(server_args.resolved_dict())" in engine
    watermark = _source("srt/sampling/watermarking/core.py")
    redacted = re.search(r"WATERMARK_SECRET_FIELD_NAMES = frozenset\(\s*\{([^}]*)\}", watermark)
    assert redacted is not None
    assert set(re.findall(r'"(\w+)"', redacted.group(1))) == {
        "watermark_key",
        "watermark_key_b",
        "watermark_config",
    }
    fields = _source("srt/arg_groups/fields/serving.py")
    assert re.search(r"^\s+api_key: A\[", fields, flags=re.M)  # a plain server_args field


def test_ranks_above_zero_serve_health_and_metrics_without_a_key_on_host_and_port() -> None:
    common = _source("srt/utils/common.py")
    placeholder = _function(common, "launch_dummy_health_check_server")
    assert re.findall(r'@app\.get\("([^"]+)"\)', placeholder) == [
        "/ping",
        "/health",
        "/health_generate",
    ]
    assert "add_prometheus_middleware(app)" in placeholder  # /metrics with --enable-metrics
    assert "api_key" not in placeholder  # no key: SGLang's middleware is not added
    assert "host=host" in placeholder
    engine = _source("srt/entrypoints/engine.py")
    # bound where rank 0's API server binds: --host and --port (the operator's 0.0.0.0)
    assert re.search(
        r"launch_dummy_health_check_server\(\s*get_serving\(\)\.host,\s*get_serving\(\)\.port,",
        engine,
    )
    assert ENGINE_LISTEN_HOST == "0.0.0.0"
