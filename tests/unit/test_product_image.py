"""The operator's own image settings: the chart's env and ``sparkllm render``'s flags.

Both read the same four settings (image, pull policy, pull secrets) through one checked
constructor; a bad value is one line naming the env variable or the flag, and every pod
template the renderers make takes the settings (tests/unit/test_airgapped_install.py
follows the whole install).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sparkllm.cli import build_parser, version_text
from sparkllm.errors import SparkllmError
from sparkllm.render.product_image import (
    DEFAULT_IMAGE,
    ENV_NAMES,
    FLAG_NAMES,
    IMAGE_ENV,
    PULL_POLICY_ENV,
    PULL_SECRETS_ENV,
    ProductImage,
    product_image_from,
)
from sparkllm.sglang_contract.flags import SGLANG_VERSION

ROOT = Path(__file__).resolve().parents[2]
DIGEST = "sha256:" + "ab" * 32


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, ProductImage()),
        ({IMAGE_ENV: "", PULL_POLICY_ENV: "", PULL_SECRETS_ENV: ""}, ProductImage()),
        (
            {IMAGE_ENV: "mirror.local/sparkllm:0.1.0", PULL_POLICY_ENV: "Always"},
            ProductImage("mirror.local/sparkllm:0.1.0", "Always"),
        ),
        (
            {IMAGE_ENV: f"registry.local:5000/sparkllm@{DIGEST}", PULL_SECRETS_ENV: "a, b.c,"},
            ProductImage(f"registry.local:5000/sparkllm@{DIGEST}", pull_secrets=("a", "b.c")),
        ),
    ],
)
def test_the_env_gives_the_settings_defaults_where_unset(
    environ: dict[str, str], expected: ProductImage
) -> None:
    assert product_image_from(environ) == expected


def test_the_default_is_this_versions_published_image() -> None:
    assert DEFAULT_IMAGE == "ghcr.io/sparkllm/sparkllm:0.1.0"
    assert ProductImage().pod_pull_secrets() == []
    secrets = ProductImage(pull_secrets=("regcred", "other")).pod_pull_secrets()
    assert secrets == [{"name": "regcred"}, {"name": "other"}]


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({IMAGE_ENV: "registry.local/sparkllm"}, f"{IMAGE_ENV}: 'registry.local/sparkllm' is not"),
        ({IMAGE_ENV: "registry.local/sparkllm:latest"}, "or uses :latest"),
        ({PULL_POLICY_ENV: "Sometimes"}, f"{PULL_POLICY_ENV}: 'Sometimes' is not one of Always"),
        ({PULL_SECRETS_ENV: "regcred,Bad_Name"}, f"{PULL_SECRETS_ENV}: 'Bad_Name' is not a"),
    ],
)
def test_a_bad_env_value_is_one_line_naming_the_variable(
    environ: dict[str, str], message: str
) -> None:
    with pytest.raises(SparkllmError) as caught:
        product_image_from(environ)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_render_takes_the_same_settings_as_flags(tmp_path: Path) -> None:
    """The flags the errors name are the parser's, and a bad one exits 1 with that line."""
    image, policy, secret = FLAG_NAMES
    argv = ["render", "-f", "x.yaml", image, "r/s:1", policy, "Never", secret, "a", secret, "b"]
    args = build_parser().parse_args(argv)
    assert (args.image, args.image_pull_policy, args.image_pull_secret) == (
        "r/s:1",
        "Never",
        ["a", "b"],
    )
    assert len(ENV_NAMES) == len(FLAG_NAMES)
    sample = ROOT / "manifests" / "samples" / "deepseek-v4-flash.yaml"
    bad = subprocess.run(
        [sys.executable, "-m", "sparkllm.cli", "render", "-f", str(sample),
         "--image-pull-secret", "Bad_Name"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert bad.returncode == 1
    assert bad.stderr == (
        "sparkllm: error: --image-pull-secret: 'Bad_Name' is not a Secret name (DNS subdomain)\n"
    )


def test_version_names_the_package_and_the_sglang_contract() -> None:
    assert version_text() == f"sparkllm 0.1.0 (SGLang contract {SGLANG_VERSION})"
    shown = subprocess.run(
        [sys.executable, "-m", "sparkllm.cli", "--version"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert shown.stdout == "sparkllm 0.1.0 (SGLang contract 0.5.23)\n"
