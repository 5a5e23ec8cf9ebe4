"""A Secret value that starts with "-" survives the rendered command lines (sglang_contract.argv).

The engine key comes from a Secret — possibly the user's (``spec.engine.apiKeySecretRef``)
— and reaches SGLang's argparse as ``--api-key=<key>``: on rank 0 the engine launcher adds
it from the env inside the process (it is on no command line, issue 25); the kubelet
substitutes it for ``$(SPARKLLM_ENGINE_API_KEY)`` in the router's args. As a word of its
own, a key like ``-dash-leading-key`` is an option to argparse and the process exits
("expected one argument"). These tests take the rendered containers, expand them
exactly as the kubelet does (``devcluster.kubelet``), and hand the result to the parsers
that really read them: the simulator's model of SGLang's argparse and of the launcher
(rank 0), smg 1.13.0's own argparse, and a real ``smg launch`` process that must start
and present the key to a worker. The two-word form is checked to fail for smg, so each
test can tell the forms apart. Also here: the argv helpers, table-driven.
"""

from __future__ import annotations

import asyncio
import copy
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, ClassVar

import httpx
import pytest
import yaml
from smg.launch_router import parse_router_args

from sparkllm.api import InferenceCluster, validate_inference_cluster
from sparkllm.errors import SpecError
from sparkllm.reconcile.decide.secrets import engine_key_ref
from sparkllm.render import ReplicaPlan, render_replica
from sparkllm.render.gateway import render_gateway
from sparkllm.render.product_image import ProductImage
from sparkllm.render.router import ROUTER_LAUNCHER_CODE
from sparkllm.sglang_contract.argv import attached, flag_name, option_value, replace_option_values
from sparkllm.sglang_contract.command import launched_args
from sparkllm_dev.devcluster import kubelet
from sparkllm_dev.devcluster.gateway_io import (
    ROUTER_PORT_FLAGS,
    free_port,
    localize_router_args,
    with_worker_url,
)
from sparkllm_dev.errors import DevClusterError
from sparkllm_dev.sim.server import prepare
from tests.unit.loopback_http import JSONHandler, serving

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
USER_SECRET = {"name": "user-engine-key", "key": "token"}
DASH_KEY = "-dash-leading-key"
# Keys a user may put in a Secret that argparse would misread as separate words.
AWKWARD_KEYS = [
    DASH_KEY,
    "--looks-like-a-flag",
    "--port",  # the name of a real flag of both parsers
    "-1",  # a negative number
    "-",
    # Not "--": Python 3.11's argparse drops a "--" even from "--api-key=--", so no form
    # passes that one key to SGLang or smg (docs/api.md says so).
    "-k=v=w",  # '=' inside the value: only the first '=' splits
    "-key with spaces",
    "0123456789abcdef",  # an ordinary (generated, hex) key still works
]
DEADLINE_SECONDS = 30.0


def user_keyed_cluster() -> InferenceCluster:
    """The sample, its engine key in a user's Secret (the case a generated key avoids)."""
    doc: dict[str, Any] = copy.deepcopy(yaml.safe_load(SAMPLE.read_text()))
    doc["metadata"] = {"name": "llm", "namespace": "serving", "uid": "uid-1"}
    doc["spec"]["engine"]["apiKeySecretRef"] = USER_SECRET
    return validate_inference_cluster(doc)


def started(
    pod_spec: dict[str, Any], container_name: str, *, key: str
) -> tuple[list[str], dict[str, str]]:
    """The container's command line as the kubelet starts it, and its env, its Secret key
    set to ``key``."""
    container = next(c for c in pod_spec["containers"] if c["name"] == container_name)
    refs = kubelet.key_refs(container)
    assert [(r.kind, r.name, r.key) for r in refs] == [("Secret", *USER_SECRET.values())]
    pod = {"metadata": {}, "spec": pod_spec, "status": {}}
    env = kubelet.container_env(pod, container, values=dict.fromkeys(refs, key))
    return kubelet.command_line(container, env), env


def started_command(pod_spec: dict[str, Any], container_name: str, *, key: str) -> list[str]:
    return started(pod_spec, container_name, key=key)[0]


def rank0_started(*, key: str) -> tuple[list[str], dict[str, str]]:
    ic = user_keyed_cluster()
    plan = ReplicaPlan(
        index=0, group_key="g", nodes=("n0", "n1", "n2"), rank0_ip="127.0.0.1", generation=1
    )
    rank0 = render_replica(ic, plan=plan, engine_key=engine_key_ref(ic))[0]
    assert rank0["metadata"]["name"] == "llm-r0-rank0"
    return started(rank0["spec"]["template"]["spec"], "engine", key=key)


def router_started(*, key: str) -> tuple[list[str], dict[str, str]]:
    ic = user_keyed_cluster()
    objects = render_gateway(ic, engine_key=engine_key_ref(ic), gateway_image=ProductImage("img:1"))
    deployment = next(o for o in objects if o["kind"] == "Deployment")
    return started(deployment["spec"]["template"]["spec"], "router", key=key)


def router_command(*, key: str) -> list[str]:
    """smg's words as its launcher hands them over: ``launch``, the args, then the key."""
    command, env = router_started(key=key)
    assert command[:4] == ["python", "-c", ROUTER_LAUNCHER_CODE, "launch"]
    assert not any("api-key" in word for word in command[3:])  # on no command line
    return ["smg", *launched_args(command[3:], env)]


def as_two_words(command: Sequence[str], *, key: str) -> list[str]:
    """The old rendering, ``--api-key KEY``: what a leading '-' broke."""
    out: list[str] = []
    for word in command:
        out += ["--api-key", key] if word == f"--api-key={key}" else [word]
    assert out != list(command)
    return out


# --- rank 0: the simulator's parser (the pinned SGLang's argparse contract) -------------


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_rank0_starts_with_exactly_the_users_key(key: str) -> None:
    """The key is on no command line (issue 25): the engine launcher adds it from rank 0's
    env inside the process (the simulator runs the same step), as one word."""
    command, env = rank0_started(key=key)
    assert not any("api-key" in word for word in command[3:])  # [2]: the launcher's code
    rank = prepare(["--", *command], env=env)
    assert rank.config.api_key == key

    async def status(headers: dict[str, str]) -> int:
        transport = httpx.ASGITransport(app=rank.app)  # type: ignore[arg-type]
        async with httpx.AsyncClient(transport=transport, base_url="http://rank0") as client:
            return (await client.get("/get_server_info", headers=headers)).status_code

    assert asyncio.run(status({"Authorization": f"Bearer {key}"})) == 200
    assert asyncio.run(status({"Authorization": "Bearer not-the-key"})) == 401


def test_rank0_without_its_key_variable_starts_without_a_key() -> None:
    """The launcher adds no key when the variable is unset (ranks > 0): the contrast that
    shows the key above came from the env, not from the command line."""
    command, env = rank0_started(key=DASH_KEY)
    rank = prepare(["--", *command], env={k: v for k, v in env.items() if v != DASH_KEY})
    assert rank.config.api_key is None


# --- the router: smg's own argparse, then a real smg process ----------------------------


@pytest.mark.parametrize("key", AWKWARD_KEYS)
def test_router_args_parse_with_smg_and_carry_the_key(key: str) -> None:
    command = router_command(key=key)
    assert command[:2] == ["smg", "launch"]
    parsed = parse_router_args(command[2:])
    parsed._validate_router_args()
    assert parsed.api_key == key


def test_router_two_word_key_is_what_smg_refused(capsys: pytest.CaptureFixture[str]) -> None:
    command = as_two_words(router_command(key=DASH_KEY), key=DASH_KEY)
    with pytest.raises(SystemExit) as exited:
        parse_router_args(command[2:])
    assert exited.value.code == 2
    assert "argument --api-key: expected one argument" in capsys.readouterr().err


class _Worker(JSONHandler):
    """A stand-in engine that answers everything and records the Authorization headers."""

    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server calls it by this name
        type(self).seen.append(self.headers.get("Authorization"))
        self.answer(b'{"model_path": "m", "is_generation": true}')


@pytest.fixture
def worker() -> Iterator[str]:
    _Worker.seen = []
    with serving(_Worker) as url:
        yield url


def test_smg_starts_with_a_dash_leading_key_and_presents_it(worker: str, tmp_path: Path) -> None:
    """The rendered router command runs for real: the launcher's code, smg with the
    rendered args (localized, discovery swapped for one worker), the key only in the env.
    smg presents it to the worker, and it is not on the process's command line."""
    command, env = router_started(key=DASH_KEY)
    assert not any(DASH_KEY in word for word in command)  # only the env holds it
    ports = {flag: free_port("127.0.0.1") for flag in ROUTER_PORT_FLAGS}
    args = localize_router_args(with_worker_url(command[4:], url=worker), ports=ports)
    log = tmp_path / "smg.log"
    with log.open("wb") as sink:
        process = subprocess.Popen(
            [sys.executable, *command[1:4], *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env},
        )
    liveness = f"http://127.0.0.1:{ports['--health-check-port']}/liveness"
    try:
        deadline = time.monotonic() + DEADLINE_SECONDS
        live = False
        while time.monotonic() < deadline and not (live and f"Bearer {DASH_KEY}" in _Worker.seen):
            assert process.poll() is None, f"smg exited: {log.read_text(errors='replace')}"
            try:
                live = httpx.get(liveness, timeout=2, trust_env=False).status_code == 200
            except httpx.HTTPError:
                live = False
            time.sleep(0.1)
        assert live, f"smg never answered {liveness}: {log.read_text(errors='replace')}"
        assert f"Bearer {DASH_KEY}" in _Worker.seen, _Worker.seen
        # smg retitles its process (smg::router); either way the key is not in it
        assert DASH_KEY.encode() not in Path(f"/proc/{process.pid}/cmdline").read_bytes()
    finally:
        process.kill()  # ours; a graceful stop waits out smg's drain window
        process.wait(timeout=DEADLINE_SECONDS)


# --- the argv helpers -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("word", "name"),
    [
        ("--port", "--port"),
        ("--port=1", "--port"),
        ("--api-key=-x=y", "--api-key"),
        ("--api-key=", "--api-key"),
        ("-1", None),
        ("value", None),
        ("--", None),
        ("-h", None),  # short options are not ours to read
    ],
)
def test_flag_name(word: str, name: str | None) -> None:
    assert flag_name(word) == name


@pytest.mark.parametrize(
    ("words", "flag", "value"),
    [
        (["--port", "1"], "--port", "1"),
        (["--port=1"], "--port", "1"),
        (["--port", "1", "--port=2"], "--port", "2"),  # the last wins, as in argparse
        (["--port=1", "--port", "2"], "--port", "2"),
        (["--api-key=--port", "--host", "h"], "--port", None),  # an attached value
        (["--port", "-1"], "--port", "-1"),
        (["--port", "--port", "--host", "h"], "--port", "--port"),  # a value is not a flag
        (["--port"], "--port", None),  # no value
        (["--portal", "1", "--portal=2"], "--port", None),  # exact spellings only
        (["--port=a=b"], "--port", "a=b"),
    ],
)
def test_option_value_reads_both_forms(words: list[str], flag: str, value: str | None) -> None:
    assert option_value(words, flag) == value


@pytest.mark.parametrize(
    ("words", "expected"),
    [
        (["--port", "1", "--host=h"], ["--port", "9", "--host=127.0.0.1"]),
        (["--port=1", "--keep", "k"], ["--port=9", "--keep", "k"]),
        (["--api-key=--port", "--port", "1"], ["--api-key=--port", "--port", "9"]),
        (["--port"], ["--port"]),  # last, with no value: left alone
        ([], []),
    ],
)
def test_replace_option_values_keeps_the_form(words: list[str], expected: list[str]) -> None:
    assert replace_option_values(words, {"--port": "9", "--host": "127.0.0.1"}) == expected


@pytest.mark.parametrize("flag", ["port", "-p", "--", "--a=b"])
def test_attached_wants_a_long_option(flag: str) -> None:
    with pytest.raises(SpecError, match="not a long option name"):
        attached(flag, "x")


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (
            ["--host", "0.0.0.0", "--port=30080", "--health-check-port", "30081",
             "--prometheus-host=0.0.0.0", "--prometheus-port", "29000",
             f"--api-key={DASH_KEY}", "--service-discovery-port=30000"],
            ["--host", "127.0.0.1", "--port=41000", "--health-check-port", "41002",
             "--prometheus-host=127.0.0.1", "--prometheus-port", "41001",
             f"--api-key={DASH_KEY}", "--service-discovery-port=30000"],
        ),
        (["--api-key=--port", "--log-level", "info"], ["--api-key=--port", "--log-level", "info"]),
    ],
)  # fmt: skip
def test_router_ports_are_localized_in_either_form(args: list[str], expected: list[str]) -> None:
    ports = {"--port": 41000, "--prometheus-port": 41001, "--health-check-port": 41002}
    assert localize_router_args(args, ports=ports) == expected


def test_a_router_port_flag_without_a_local_port_is_refused() -> None:
    with pytest.raises(DevClusterError, match="--health-check-port"):
        localize_router_args(["--health-check-port=1"], ports={})


def test_discovery_is_swapped_for_a_worker_url_in_either_form() -> None:
    args = [
        "--service-discovery", "--selector", "app=engine", "rank=0",
        "--service-discovery-namespace=llm", "--service-discovery-port", "30000",
        f"--api-key={DASH_KEY}", "--policy", "cache_aware",
    ]  # fmt: skip
    assert with_worker_url(args, url="http://127.0.0.1:9") == [
        f"--api-key={DASH_KEY}", "--policy", "cache_aware",
        "--worker-urls", "http://127.0.0.1:9",
    ]  # fmt: skip
