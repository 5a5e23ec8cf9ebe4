"""The docs' tables and references say what the code and the chart do.

Three kinds of drift a reader cannot see and CI can:

* docs/api.md's "Spec at a glance" lists every field of the CRD's spec with its type
  and default, and nothing else (generated here from ``build_crd()``, compared row by row;
  the Bounds column is prose and not compared);
* docs/install.md's permission tables are the chart's two ClusterRoles exactly, every
  optional rule included (HA peering, PodMonitors, the gateway's grants);
* README.md and docs/ link only to files that exist and cite no internal tracker
  (``issue 25``, ``#30``, ``wave 2``): a reader has neither.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from sparkllm.api.crd import build_crd
from tests.unit.test_chart_render import MONITORING_API, render_chart

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
JSON = dict[str, Any]


def section(doc: Path, heading: str) -> str:
    """The text under ``heading`` up to the next heading of the same or a higher level."""
    text = doc.read_text(encoding="utf-8")
    start = text.index(heading + "\n")
    level = heading.split(" ", 1)[0]
    following = re.search(rf"^#{{1,{len(level)}}} ", text[start + len(heading) :], re.M)
    end = start + len(heading) + following.start() if following else len(text)
    return text[start:end]


def table_rows(text: str) -> list[list[str]]:
    """The cells of every table body row in ``text`` (header and rule rows skipped)."""
    lines = text.split("\n")
    rows = []
    for index, line in enumerate(lines):
        header = index + 1 < len(lines) and re.fullmatch(r"\|[-|: ]+\|", lines[index + 1])
        if not line.startswith("|") or re.fullmatch(r"\|[-|: ]+\|", line) or header:
            continue  # not a row, the rule under the header, or the header
        cells = [cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]]
        rows.append(cells)
    return rows


# --- api.md: the spec table ---------------------------------------------------------------


def _type(schema: JSON) -> str:
    kind = schema.get("type", "any")
    if kind == "array":
        return "[]" + _type(schema["items"])
    if kind == "object" and "properties" not in schema and "additionalProperties" in schema:
        return "map[string]" + _type(schema["additionalProperties"])
    return str(kind)


def spec_fields(schema: JSON, path: str = "spec") -> dict[str, tuple[str, str]]:
    """Every field under ``schema``: path -> (type, default) as the table writes them
    (``required`` when the parent requires it, ``—`` when neither)."""
    required = set(schema.get("required", []))
    fields: dict[str, tuple[str, str]] = {}
    for name, child in schema.get("properties", {}).items():
        here = f"{path}.{name}"
        if "default" in child:
            default = f"`{json.dumps(child['default'])}`"
        else:
            default = "required" if name in required else "—"
        fields[here] = (_type(child), default)
        inner, inner_path = child, here
        while inner.get("type") == "array" and inner["items"].get("type") in ("object", "array"):
            inner, inner_path = inner["items"], inner_path + "[]"
        if inner.get("type") == "object":
            fields |= spec_fields(inner, inner_path)
    return fields


def test_api_md_spec_table_lists_every_field_of_the_crd_with_its_type_and_default() -> None:
    schema = build_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    generated = spec_fields(schema["properties"]["spec"])
    rows = table_rows(section(ROOT / "docs" / "api.md", "## Spec at a glance"))
    documented = {row[0].strip("`"): (row[1], row[2]) for row in rows}
    missing = sorted(set(generated) - set(documented))
    extra = sorted(set(documented) - set(generated))
    differ = {
        path: {"doc": documented[path], "crd": generated[path]}
        for path in sorted(set(generated) & set(documented))
        if documented[path] != generated[path]
    }
    assert not missing, f"docs/api.md lacks {missing}: {[generated[m] for m in missing]}"
    assert not extra, f"docs/api.md's spec table names fields the CRD has not: {extra}"
    assert not differ, f"docs/api.md's spec table: type/default differ from the CRD: {differ}"


# --- install.md: the permission tables ----------------------------------------------------


def granted(rules: list[JSON]) -> dict[str, set[str]]:
    """``resource.group`` (as ``kubectl auth can-i --list`` prints it) -> verbs."""
    grants: dict[str, set[str]] = {}
    for rule in rules:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                name, _, sub = resource.partition("/")
                key = f"{name}.{group}" if group else name
                key += f"/{sub}" if sub else ""
                grants.setdefault(key, set()).update(rule["verbs"])
    return grants


def chart_roles() -> dict[str, dict[str, set[str]]]:
    """Both ClusterRoles with every optional rule: a namespace list with HA and the
    PodMonitor API served, then all namespaces with HA (its cluster-wide peering)."""
    roles: dict[str, dict[str, set[str]]] = {"namespaced": {}, "cluster": {}}
    for values, apis in (
        ({"replicas": 2, "watchNamespaces": ["llm"]}, MONITORING_API),
        ({"replicas": 2}, ()),
    ):
        for obj in render_chart(values, api_versions=apis, release="s"):
            if obj["kind"] != "ClusterRole":
                continue
            scope = "cluster" if obj["metadata"]["name"].endswith("-cluster") else "namespaced"
            for resource, verbs in granted(obj["rules"]).items():
                roles[scope].setdefault(resource, set()).update(verbs)
    return roles


def documented_roles() -> dict[str, dict[str, set[str]]]:
    text = section(ROOT / "docs" / "install.md", "## Permissions, and why each")
    namespaced, cluster = text.split("Cluster-scoped", 1)
    roles: dict[str, dict[str, set[str]]] = {}
    for scope, part in (("namespaced", namespaced), ("cluster", cluster)):
        roles[scope] = {}
        for row in table_rows(part):
            verbs = {verb.strip() for verb in row[1].split(",")}
            for resource in row[0].split(","):
                assert resource.strip() not in roles[scope], f"{resource} listed twice"
                roles[scope][resource.strip()] = verbs
    return roles


@pytest.mark.needs_binary  # helm (make binaries)
def test_install_md_permission_tables_are_the_charts_cluster_roles_exactly() -> None:
    assert documented_roles() == chart_roles()


# --- references ---------------------------------------------------------------------------

# An upstream pull request ("sgl-project/sglang PR #37479") is a public reference, not ours.
INTERNAL = re.compile(r"\bissues? \d+|(?<![\w&/])(?<!PR )#\d+\b|\bwave \d+|\bDESIGN\.md\b", re.I)
TEMPLATE_COMMENT = re.compile(r"\{\{-?\s*/\*.*?\*/\s*-?\}\}", re.S)  # kept out of the render
LINK = re.compile(r"\]\(([^)#\s\[\]*]+)(?:#[^)]*)?\)")


def test_docs_cite_no_internal_issue_and_link_only_to_files_that_exist() -> None:
    problems = []
    for doc in DOCS:
        for number, line in enumerate(doc.read_text(encoding="utf-8").split("\n"), 1):
            where = f"{doc.relative_to(ROOT)}:{number}"
            problems += [f"{where}: cites {m.group(0)!r}" for m in INTERNAL.finditer(line)]
            for target in LINK.findall(re.sub(r"`[^`]*`", "", line)):  # not in code
                if "://" in target or target.startswith("mailto:"):
                    continue
                if not (doc.parent / target).exists():
                    problems.append(f"{where}: links to {target}, which does not exist")
    assert not problems, "\n".join(problems)


def test_what_users_copy_or_render_cites_no_internal_issue() -> None:
    """The chart (its YAML comments are rendered; a template comment is not), the CRDs
    (``kubectl explain``) and the manifests and samples users copy."""
    problems = []
    for top in ("charts", "crds", "manifests"):
        for path in sorted((ROOT / top).rglob("*")):
            if not path.is_file() or path.suffix not in (".yaml", ".yml", ".tpl", ".txt", ".json"):
                continue
            text = TEMPLATE_COMMENT.sub(lambda m: "\n" * m.group(0).count("\n"), path.read_text())
            for number, line in enumerate(text.split("\n"), 1):
                where = f"{path.relative_to(ROOT)}:{number}"
                problems += [f"{where}: cites {m.group(0)!r}" for m in INTERNAL.finditer(line)]
    assert not problems, "\n".join(problems)


def test_the_reference_check_sees_what_it_must() -> None:
    assert INTERNAL.search("as before issue 25 (six chats")
    assert INTERNAL.search("see #30 for the fix")
    assert INTERNAL.search("wave 2 moved it")
    assert INTERNAL.search("DESIGN.md section 4")
    assert not INTERNAL.search("`sparkllm.io/acceptance=demo` on port 30080, 1,579,520 tokens")
    assert not INTERNAL.search("[x](exposure.md#tls)")
    assert not INTERNAL.search("the cookbook, sgl-project/sglang PR #37479")
    assert LINK.findall("see [exposure](exposure.md#tls) and [d](../DESIGN.md)") == [
        "exposure.md",
        "../DESIGN.md",
    ]
