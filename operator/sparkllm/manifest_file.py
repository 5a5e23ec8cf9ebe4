"""Read the one InferenceCluster a user points ``sparkllm plan`` / ``render`` at.

Why a module of its own: both commands take ``-f FILE`` and must say what is wrong with
the file in one line (SpecError), never with a traceback or YAML's multi-line pointer
art: a file that is not UTF-8, YAML that does not parse (the line and the problem), or a
stream of several documents (a Secret and the InferenceCluster in one file, as
``kubectl apply -f`` takes it: the one InferenceCluster among them is used).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from sparkllm.errors import SpecError

KIND = "InferenceCluster"


def yaml_problem(exc: yaml.YAMLError) -> str:
    """YAML's error in one line: the problem and where."""
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        return f"{exc.problem} (line {mark.line + 1}, column {mark.column + 1})"
    return " ".join(str(exc).split())


def read_manifest(path: str | Path) -> dict[str, Any]:
    """The InferenceCluster object in ``path``: the file's only document, or the one
    document of kind InferenceCluster among several; SpecError naming the problem."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise SpecError(
            f"cannot read {path}: not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from None
    except OSError as exc:
        raise SpecError(f"cannot read {path}: {exc}") from exc
    try:
        documents = [d for d in yaml.safe_load_all(text) if d is not None]
    except yaml.YAMLError as exc:
        raise SpecError(f"cannot read {path}: {yaml_problem(exc)}") from exc
    if len(documents) > 1:
        found = [d for d in documents if isinstance(d, dict) and d.get("kind") == KIND]
        if len(found) != 1:
            raise SpecError(
                f"{path}: {len(documents)} YAML documents, {len(found)} of kind {KIND}; "
                f"expected one {KIND} object"
            )
        documents = found
    if len(documents) != 1 or not isinstance(documents[0], dict):
        raise SpecError(f"{path}: expected one {KIND} object")
    document: dict[str, Any] = documents[0]
    return document
