"""Open WebUI as the team's front end, through a real browser, on the dev cluster.

The real operator serves one simulated replica behind the real front door; Open WebUI runs
as the chart renders it (``openWebUI.enabled``: its container's environment as the
kubelet would set it, ``sparkllm_dev.devcluster.open_webui``) with the front-end key from
its Secret and ``ENABLE_FORWARD_USER_INFO_HEADERS``. The governance policy marks that key
as a front end (``frontends``), so the front door charges each signed-in user by the
``X-OpenWebUI-User-Email`` header Open WebUI sends, as ``<email>@<key's user>``.

Shown, in a real Chromium (Debian's, driven by selenium through chromium-driver):
ada signs in on Open WebUI's own sign-in page, sends a chat message and sees the answer
arrive in pieces (its text read while it grows, every read a prefix of the next) until
it is complete. Then the front door's usage (``GET /v1/usage`` as an admin, the rows
``sparkllm usage`` prints) has ada's row with her requests and tokens, and none for bob,
who has an account and a budget but sent nothing: his budget is untouched. A screenshot
of the finished chat is saved and its path printed.

Open WebUI runs offline (``offline: true``: no model downloads at start; every
connection off this machine is sent to a closed port) from the venv
``hack/setup-open-webui.sh`` installs (``make tools``); nothing is installed here.
"""

from __future__ import annotations

import base64
import itertools
import json
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from selenium import webdriver
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.common.keys import Keys
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support import expected_conditions
from selenium.webdriver.support.ui import WebDriverWait

from sparkllm.gateway.governance.usage import table
from sparkllm.usage_command import fetch_usage
from sparkllm_dev.devcluster import wait_until
from sparkllm_dev.devcluster.open_webui import container_env, localized, run_open_webui, venv_dir
from sparkllm_dev.testing import OperatorProcess
from tests.e2e.serving import DEADLINE, USERS_SECRET, serve
from tests.unit.gateway_fixtures import MODEL
from tests.unit.test_chart_render import one, render_chart
from tests.unit.tooling import filled, on_path

pytestmark = [pytest.mark.cluster, pytest.mark.needs_binary]  # chromium, Open WebUI's venv
NAME = "webui"
GROUPS = [["spark-a0", "spark-a1", "spark-a2"]]
POLICY = "webui-policy"
FRONTEND = "webui"  # the users' Secret entry holding Open WebUI's key
KEY_SECRET = ("open-webui-key", "token")  # the chart's openWebUI.apiKeySecretRef
TPOT_MS = 60  # slow enough that the browser reads the answer while it grows
ANSWER_TOKENS = 48
ADMIN = ("Admin", "admin@example.com")
ADA = ("Ada", "ada@example.com")
BOB = ("Bob", "bob@example.com")
BUDGET = 200_000  # tokens per day for each UI user
# As on an air-gapped cluster: any connection but to this machine goes to a closed port,
# so a download at start (a model, a version check) fails instead of quietly working.
NO_INTERNET = {
    **{name: "http://127.0.0.1:9" for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")},
    "NO_PROXY": "127.0.0.1,localhost",
}
START_SECONDS = 300  # Open WebUI's first start: migrations, its caches (busy 2-core machine)


def _policy() -> str:
    users = {f"{email}@{FRONTEND}": {"tokensPerDay": BUDGET} for _, email in (ADA, BOB)}
    document = {
        "admins": ["alice"],
        "users": users,
        "frontends": {FRONTEND: {"userHeader": "X-OpenWebUI-User-Email"}},
    }
    return yaml.safe_dump(document)


def _chart_env(namespace: str, key: str) -> dict[str, str]:
    """The chart's Open WebUI container environment, its Secret reference resolved."""
    values = {
        "openWebUI": {
            "enabled": True,
            "frontDoor": {"inferenceCluster": NAME, "namespace": namespace, "url": ""},
            "apiKeySecretRef": {"name": KEY_SECRET[0], "key": KEY_SECRET[1]},
            "defaultModel": MODEL,
        }
    }
    deployment = one(render_chart(values, namespace=namespace), "Deployment")
    return container_env(deployment, {KEY_SECRET: key})


def _accounts(url: str) -> None:
    """The first account (the admin, as on a fresh install), who then adds ada and bob."""
    name, email = ADMIN
    body = {"name": name, "email": email, "password": _password(email)}
    signup = httpx.post(f"{url}/api/v1/auths/signup", json=body, timeout=60)
    assert signup.status_code == 200, signup.text
    assert signup.json()["role"] == "admin"
    admin = {"authorization": f"Bearer {signup.json()['token']}"}
    for name, email in (ADA, BOB):
        body = {"name": name, "email": email, "password": _password(email), "role": "user"}
        added = httpx.post(f"{url}/api/v1/auths/add", json=body, headers=admin, timeout=60)
        assert added.status_code == 200, added.text


class StreamNotSeenError(AssertionError):
    """The answer appeared in the page whole, not growing."""


def _password(email: str) -> str:
    return f"pw-{email}-Sparkllm1!"


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[WebDriver]:
    options = webdriver.ChromeOptions()
    options.binary_location = on_path("chromium")
    arguments = ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage"]
    arguments += ["--window-size=1280,900", f"--user-data-dir={tmp_path / 'chromium'}"]
    for argument in arguments:
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(on_path("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


def _sign_in(driver: WebDriver, url: str, who: tuple[str, str]) -> None:
    wait = WebDriverWait(driver, 120)
    driver.get(f"{url}/auth")
    wait.until(expected_conditions.visibility_of_element_located((By.ID, "email")))
    driver.find_element(By.ID, "email").send_keys(who[1])
    driver.find_element(By.ID, "password").send_keys(_password(who[1]))
    driver.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait.until(expected_conditions.element_to_be_clickable((By.ID, "chat-input")))


READ_ANSWER = """
const shown = document.querySelectorAll('.chat-assistant #response-content-container');
const text = shown.length ? shown[shown.length - 1].innerText.trim() : '';
return [text, document.querySelectorAll('.copy-response-button').length > 0];
"""


def _chat_and_watch(driver: WebDriver, message: str) -> list[str]:
    """Send ``message``; every distinct answer text read until the answer is complete."""
    box = driver.find_element(By.ID, "chat-input")
    box.click()
    box.send_keys(message)
    box.send_keys(Keys.ENTER)
    seen: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            # One round trip per read (the answer takes ~3 s): its text, and whether Open
            # WebUI shows the message's copy button, which it does once the message is done.
            text, done = driver.execute_script(READ_ANSWER)
        except WebDriverException:  # the message re-rendered under us: read again
            continue
        if text and (not seen or text != seen[-1]):
            seen.append(text)
        if done and text:
            return seen
    raise AssertionError(f"the answer did not complete in 120 s; read {seen[-3:]}")


def _rows(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["user"]: row for row in report["data"]}


@pytest.mark.sim_args(f"--sim-tpot-ms={TPOT_MS}", f"--sim-answer-tokens={ANSWER_TOKENS}")
def test_a_signed_in_user_chats_through_open_webui_and_is_charged_by_name(
    namespace: str,
    shared_operator: OperatorProcess,
    model_dir: Path,
    tmp_path: Path,
    browser: WebDriver,
) -> None:
    filled(venv_dir(), marker=".complete")
    started = time.monotonic()
    steps: list[str] = []

    def step(what: str) -> None:
        steps.append(f"{time.monotonic() - started:5.0f} s  {what}")

    cluster = shared_operator.cluster
    policy = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": POLICY},
              "data": {"policy.yaml": _policy()}}  # fmt: skip
    cluster.kubectl("apply", "-n", namespace, "-f", "-", input=yaml.safe_dump(policy))
    admission = {"governance": {"policyConfigMapRef": {"name": POLICY}}}
    with serve(cluster, namespace, name=NAME, model_dir=model_dir, groups=GROUPS,
               log_dir=tmp_path / "gw", admission=admission) as serving:  # fmt: skip
        door = serving.gateway.admission_url
        step("front door serving (operator, simulated replica, gateway pod)")
        key = secrets.token_urlsafe(24)
        patch = {"data": {FRONTEND: base64.b64encode(key.encode()).decode()}}
        cluster.kubectl("patch", "secret", USERS_SECRET, "-n", namespace, "-p", json.dumps(patch))
        wait_until(
            lambda: httpx.get(f"{door}/v1/models", headers={"authorization": f"Bearer {key}"},
                              timeout=10).status_code == 200,
            timeout=DEADLINE,
            what="the front-end key to be accepted",
        )  # fmt: skip
        env = localized(_chart_env(namespace, key), front_door=door, data_dir=tmp_path / "data")
        system = {name: os.environ[name] for name in ("PATH", "HOME") if name in os.environ}
        system |= NO_INTERNET
        log = tmp_path / "open-webui.log"
        with run_open_webui(env, log_path=log, system_env=system, timeout=START_SECONDS) as ui:
            step("Open WebUI up (the chart's environment, offline)")
            _accounts(ui.url)
            step("admin signed up; ada and bob added by the admin")
            _sign_in(browser, ui.url, ADA)
            step("ada signed in, in Chromium")
            seen = _chat_and_watch(browser, "Hello from the team's web UI")
            step(f"ada's answer streamed into the page ({len(seen)} growing reads)")
            shot = tmp_path / "open-webui-chat.png"
            assert browser.save_screenshot(str(shot))
            print(f"\nscreenshot: {shot}")
        report = fetch_usage(door, key=serving.alice, day_from=None, day_to=None)
    print("\n".join(steps))
    print(f"answer as read while it streamed ({len(seen)} reads): {seen[:3]} ... {seen[-1]!r}")
    print(table(report))
    rows = _rows(report)
    ada = rows[f"{ADA[1]}@{FRONTEND}"]
    assert ada["outcomes"].get("ok", 0) >= 1
    assert ada["input_tokens"] > 0
    assert ada["output_tokens"] >= len(seen[-1].split()) // 2
    # The front end's own row is the sum of its users' (its key bounds their total).
    assert rows[FRONTEND]["output_tokens"] >= ada["output_tokens"]
    # bob has an account and a budget, sent nothing, and was charged nothing.
    assert f"{BOB[1]}@{FRONTEND}" not in rows
    # The answer streamed: several growing reads, each a prefix of the next, the last whole
    # (spacing aside: the page lays the text out again when the message is done).
    dense = ["".join(text.split()) for text in seen]
    if len(seen) < 3 or not all(b.startswith(a) for a, b in itertools.pairwise(dense)):
        raise StreamNotSeenError(f"the page showed the answer in {len(seen)} read(s): {seen}")
