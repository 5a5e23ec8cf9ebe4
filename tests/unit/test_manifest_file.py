"""``sparkllm plan -f`` / ``sparkllm render -f`` on files a user may really hand them.

Every case is one line on stderr naming the file and the problem, exit 2 (plan) or 1
(render, sparkllm's errors), never a traceback: a file that is not UTF-8 raised
UnicodeDecodeError through both commands, and YAML errors spread over five lines of
pointer art. A Secret and the InferenceCluster in one file (as ``kubectl apply -f``
takes it) was refused; the one InferenceCluster is used now. ``sparkllm plan``'s
figures (memory, weights, KV bytes) are finite and positive, or argparse says which is not.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from sparkllm.cli import main
from sparkllm.plan_command import plan_main

SAMPLE = Path(__file__).parents[2] / "manifests" / "samples" / "deepseek-v4-flash-tp2.yaml"


def _both(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, int, str]:
    plan_rc = plan_main(["-f", str(path)])
    plan_err = capsys.readouterr().err
    render_rc = main(["render", "-f", str(path)])
    render_err = capsys.readouterr().err
    return plan_rc, plan_err, render_rc, render_err


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        pytest.param(b"\xff\xfe\x00kind", "not UTF-8 text (invalid start byte at byte 0)",
                     id="not-utf8"),
        pytest.param(b"spec: [1\n", "expected ',' or ']', but got '<stream end>' (line 2, "
                     "column 1)", id="yaml-error-in-one-line"),
        pytest.param(b"", "expected one InferenceCluster object", id="empty"),
        pytest.param(b"- a\n- b\n", "expected one InferenceCluster object", id="a-list"),
        pytest.param(b"kind: Secret\n---\nkind: Secret\n",
                     "2 YAML documents, 0 of kind InferenceCluster; expected one "
                     "InferenceCluster object", id="no-inferencecluster-among-several"),
    ],
)  # fmt: skip
def test_bad_files_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, problem: str
) -> None:
    path = tmp_path / "icl.yaml"
    path.write_bytes(content)
    plan_rc, plan_err, render_rc, render_err = _both(path, capsys)
    assert (plan_rc, render_rc) == (2, 1)
    for prefix, err in (("sparkllm plan: error: ", plan_err), ("sparkllm: error: ", render_err)):
        assert err.startswith(prefix), err
        assert err.count("\n") == 1, err
        assert err.rstrip().endswith(problem), err
        assert str(path) in err


def test_the_inferencecluster_among_several_documents_is_used(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "icl.yaml"
    path.write_text("apiVersion: v1\nkind: Secret\n---\n" + SAMPLE.read_text() + "---\n")
    assert plan_main(["-f", str(path)]) == 0
    assert "tensorParallel 2 x pipelineParallel 1" in capsys.readouterr().out
    assert main(["render", "-f", str(path)]) == 0
    assert "name: deepseek-v4-flash-tp2-r2-rank1" in capsys.readouterr().out


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--kv-bytes-per-token-layer", "0", "'0': must be a finite number above 0"),
        ("--node-memory-gb", "inf", "'inf': must be a finite number above 0"),
        ("--node-memory-gb", "nan", "'nan': must be a finite number above 0"),
        ("--node-memory-gb", "-5", "'-5': must be a finite number above 0"),
        ("--total-weight-gb", "x", "'x' is not a number"),
        ("--min-headroom-gb", "-1", "'-1': must be a finite number at least 0"),
    ],
)
def test_plan_figures_are_checked(
    capsys: pytest.CaptureFixture[str], option: str, value: str, message: str
) -> None:
    """0 bytes of KV per token divided by zero, inf memory overflowed int(): tracebacks;
    a negative node memory printed a table of negative budgets. Now argparse's usage
    error (exit 2) names the option."""
    with pytest.raises(SystemExit) as exited:
        plan_main(["-f", str(SAMPLE), option, value])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"sparkllm plan: error: argument {option}: {message}"
    )


def test_usable_memory_above_the_node_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    assert plan_main(["-f", str(SAMPLE), "--usable-memory-gb", "500"]) == 2
    assert capsys.readouterr().err == (
        "sparkllm plan: error: --usable-memory-gb 500 is more than the node's memory "
        "(--node-memory-gb 128)\n"
    )
    assert plan_main(["-f", str(SAMPLE), "--min-headroom-gb", "0"]) == 0


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe", "--admin-policy: cannot read {path}: not UTF-8 text"),
        (b"policy: [1\n", "the admin policy in {path} is not YAML: expected ',' or ']', but "
         "got '<stream end>' (line 2, column 1)"),
    ],
)  # fmt: skip
def test_render_admin_policy_file_errors_are_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes, message: str
) -> None:
    """A policy file that is not UTF-8 was a UnicodeDecodeError traceback; a YAML error
    spread over six lines."""
    path = tmp_path / "values.yaml"
    path.write_bytes(content)
    assert main(["render", "-f", str(SAMPLE), "--admin-policy", str(path)]) == 1
    assert capsys.readouterr().err == f"sparkllm: error: {message.format(path=path)}\n"
