#!/usr/bin/env python3
"""Inventory of the test functions at two commits, and where each old one went.

Why: a change that reorganises the suite (moves files, merges tests, trims examples) must
show that every behaviour tested before is still tested. Counting collected cases says how
many; this says which. It reads both sides from git objects (never the working tree, so
other people's uncommitted edits do not count) and parses each test file with ``ast``:
nothing is imported or run, so an old tree whose imports no longer resolve is read as well.

For every test function (module path, class, name) it records the number of cases its
``pytest.mark.parametrize`` decorators give when their argument lists are literals (or a
module-level literal list/tuple); anything else (a comprehension, a call) is "dynamic" and
counted as one case, so the case total is a floor. Fixture params and Hypothesis examples
are not cases here; ``pytest --collect-only`` is the ground truth for the collected count.

An old test not at its old (path, class, name) is matched in this order:
  moved     the same name elsewhere (the most similar body if there are several);
  renamed   a new name whose body is nearly the same (similarity >= RENAMED), or a new
            name in the same file near the old one (name similarity >= NAMED);
  merged?   the most similar new or changed test (>= MERGED): read it to confirm;
  removed?  nothing similar: the commit that last added or removed ``def <name>(`` is named.

Usage (from the checkout's root):

    python hack/test-inventory.py BEFORE [AFTER] [--collected BEFORE.txt AFTER.txt]

With ``--collected``, each side's ``pytest --collect-only -q`` output gives the cases as
pytest counts them (fixture params and every id included) instead of the static floor.

AFTER defaults to HEAD. The markdown goes to stdout; docs/test-inventory.md holds one run
with the reading around it.
"""

from __future__ import annotations

import argparse
import ast
import difflib
import subprocess
import sys
from collections import defaultdict
from dataclasses import dataclass, replace

ROOTS = ("tests", "harness/tests")
RENAMED = 0.75
MERGED = 0.45
NAMED = 0.75


@dataclass(frozen=True)
class TestFn:
    """One test function as written: where, its cases, and its normalised source."""

    path: str
    cls: str
    name: str
    cases: int
    dynamic: bool
    source: tuple[str, ...]

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.path, self.cls, self.name)

    @property
    def where(self) -> str:
        return "::".join(p for p in (self.path, self.cls, self.name) if p)


@dataclass(frozen=True)
class Fate:
    """What became of one old test: how, and the test that holds it now (if any)."""

    old: TestFn
    how: str
    new: TestFn | None
    note: str


def git(*args: str) -> str:
    return subprocess.run(
        ["git", *args], check=True, capture_output=True, text=True, encoding="utf-8"
    ).stdout


def test_files(rev: str) -> dict[str, str]:
    """Every ``test_*.py`` / ``*_test.py`` under the test roots at ``rev``, path -> text."""
    names = git("ls-tree", "-r", "--name-only", rev, "--", *ROOTS).split("\n")
    paths = [
        n
        for n in names
        if n.endswith(".py")
        and (n.rsplit("/", 1)[-1].startswith("test_") or n.endswith("_test.py"))
    ]
    batch = subprocess.run(
        ["git", "cat-file", "--batch"],
        input="".join(f"{rev}:{p}\n" for p in paths).encode(),
        check=True,
        capture_output=True,
    ).stdout
    texts: dict[str, str] = {}
    at = 0
    for path in paths:  # each object: "<sha> blob <size>\n<bytes>\n"
        header_end = batch.index(b"\n", at)
        size = int(batch[at:header_end].split()[2])
        texts[path] = batch[header_end + 1 : header_end + 1 + size].decode("utf-8")
        at = header_end + 1 + size + 1
    return texts


def literal_length(node: ast.expr, constants: dict[str, int]) -> int | None:
    """The number of elements of a literal list/tuple (or a name bound to one), else None."""
    if isinstance(node, ast.List | ast.Tuple):
        if any(isinstance(e, ast.Starred) for e in node.elts):
            return None
        return len(node.elts)
    if isinstance(node, ast.Name):
        return constants.get(node.id)
    return None


def is_parametrize(dec: ast.expr) -> ast.Call | None:
    if (
        isinstance(dec, ast.Call)
        and isinstance(dec.func, ast.Attribute)
        and dec.func.attr == "parametrize"
    ):
        return dec
    return None


def case_count(decorators: list[ast.expr], constants: dict[str, int]) -> tuple[int, bool]:
    """The product of the parametrize lists' lengths, and whether any was not static."""
    cases, dynamic = 1, False
    for dec in decorators:
        call = is_parametrize(dec)
        if call is None:
            continue
        values: ast.expr | None = call.args[1] if len(call.args) > 1 else None
        for kw in call.keywords:
            if kw.arg == "argvalues":
                values = kw.value
        n = None if values is None else literal_length(values, constants)
        if n is None:
            dynamic = True
        else:
            cases *= n
    return cases, dynamic


def normalised(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple[str, ...]:
    """The function's body as unparsed lines (no name, decorators or comments): compared
    line by line, which is fast and ignores formatting."""
    body = ast.Module(body=fn.body, type_ignores=[])
    return tuple(line.strip() for line in ast.unparse(body).split("\n"))


def tests_in(path: str, text: str) -> list[TestFn]:
    tree = ast.parse(text, filename=path)
    constants: dict[str, int] = {}
    for stmt in tree.body:
        targets = (
            stmt.targets
            if isinstance(stmt, ast.Assign)
            else [stmt.target]
            if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
            else []
        )
        value = stmt.value if isinstance(stmt, ast.Assign | ast.AnnAssign) else None
        for target in targets:
            if isinstance(target, ast.Name) and value is not None:
                n = literal_length(value, {})
                if n is not None:
                    constants[target.id] = n
    found: list[TestFn] = []

    def add(fn: ast.stmt, cls: str, outer: list[ast.expr]) -> None:
        if isinstance(fn, ast.FunctionDef | ast.AsyncFunctionDef) and fn.name.startswith("test"):
            cases, dynamic = case_count([*outer, *fn.decorator_list], constants)
            found.append(TestFn(path, cls, fn.name, cases, dynamic, normalised(fn)))

    for stmt in tree.body:
        if isinstance(stmt, ast.ClassDef) and stmt.name.startswith("Test"):
            for inner in stmt.body:
                add(inner, stmt.name, stmt.decorator_list)
        else:
            add(stmt, "", [])
    return found


def inventory(rev: str) -> list[TestFn]:
    return [t for path, text in sorted(test_files(rev).items()) for t in tests_in(path, text)]


def collected(listing: str) -> dict[str, int]:
    """Cases per test function from ``pytest --collect-only -q`` output (node ids)."""
    per_test: dict[str, int] = defaultdict(int)
    for line in listing.split("\n"):
        if "::" in line and not line.startswith(" "):
            per_test[line.strip().split("[", 1)[0]] += 1
    return per_test


def with_collected(tests: list[TestFn], per_test: dict[str, int]) -> list[TestFn]:
    """The tests with their collected case counts where the listing has them."""
    return [
        replace(t, cases=per_test[t.where], dynamic=False) if t.where in per_test else t
        for t in tests
    ]


def similarity(a: TestFn, b: TestFn) -> float:
    matcher = difflib.SequenceMatcher(None, a.source, b.source, autojunk=False)
    if matcher.real_quick_ratio() < MERGED or matcher.quick_ratio() < MERGED:
        return 0.0
    return matcher.ratio()


def best(old: TestFn, candidates: list[TestFn]) -> tuple[TestFn | None, float]:
    scored = [(similarity(old, c), c) for c in candidates]
    if not scored:
        return None, 0.0
    score, match = max(scored, key=lambda s: s[0])
    return match, score


def similar_name(old: TestFn, candidates: list[TestFn]) -> TestFn | None:
    """The new test in the same file whose name is nearest (ratio >= NAMED), if any: a
    rename that also rewrote the body (a condition list grown, a rule changed)."""
    scored = [(difflib.SequenceMatcher(None, old.name, c.name).ratio(), c) for c in candidates]
    scored = [s for s in scored if s[0] >= NAMED]
    return max(scored, key=lambda s: s[0])[1] if scored else None


def last_change(name: str, before: str, after: str) -> str:
    """The newest commit in before..after that added or removed ``def <name>(``."""
    out = git("log", "-S", f"def {name}(", "--format=%h", f"{before}..{after}", "--", *ROOTS)
    return out.split("\n", 1)[0]


def fates(old: list[TestFn], new: list[TestFn], before: str, after: str) -> list[Fate]:
    new_keys = {t.key for t in new}
    old_keys = {t.key for t in old}
    by_name: dict[str, list[TestFn]] = defaultdict(list)
    for t in new:
        by_name[t.name].append(t)
    old_names = {t.name for t in old}
    # Tests that are new at their place (a new key with a name not seen before) or changed.
    fresh = [t for t in new if t.key not in old_keys and t.name not in old_names]
    result: list[Fate] = []
    for t in old:
        if t.key in new_keys:
            continue
        same = [c for c in by_name[t.name] if c.key not in old_keys]
        if same:
            match, score = best(t, same)
            note = "" if score > 0.999 else f"{score:.2f}"  # the body changed in the move
            result.append(Fate(t, "moved", match or same[0], note))
            continue
        match, score = best(t, fresh)
        if match is not None and score >= RENAMED:
            result.append(Fate(t, "renamed", match, f"{score:.2f}"))
            continue
        kin = similar_name(t, [c for c in fresh if c.path == t.path])
        if kin is not None:
            result.append(Fate(t, "renamed", kin, "name"))
            continue
        anywhere, any_score = best(t, new)
        if anywhere is not None and any_score >= MERGED:
            result.append(Fate(t, "merged?", anywhere, f"{any_score:.2f}"))
            continue
        result.append(Fate(t, "removed?", None, last_change(t.name, before, after)))
    return result


def counts(tests: list[TestFn]) -> tuple[int, int, int]:
    return len(tests), sum(t.cases for t in tests), sum(t.dynamic for t in tests)


def label(t: TestFn) -> str:
    return f"{t.cls}.{t.name}" if t.cls else t.name


def shown(fate: Fate) -> str:
    """One old test in a row: its name, the new name if it changed, the evidence."""
    text = f"`{label(fate.old)}`"
    if fate.new is not None and label(fate.new) != label(fate.old):
        text += f" → `{label(fate.new)}`"
    if fate.new is not None and fate.note:
        text += f" (body {fate.note})" if fate.note != "name" else " (near name, same file)"
    if fate.new is not None and fate.new.cases != fate.old.cases:
        text += f" (cases {fate.old.cases} → {fate.new.cases})"
    if fate.new is None:
        text += f" (removed in `{fate.note}`)" if fate.note else ""
    return text


def markdown(
    old: list[TestFn],
    new: list[TestFn],
    result: list[Fate],
    *,
    revs: tuple[str, str],
    cases_are: str,
) -> str:
    (of, oc, od), (nf, nc, nd) = counts(old), counts(new)
    kept = of - len(result)
    lines = [
        f"| | `{revs[0]}` (before) | `{revs[1]}` (after) |",
        "| --- | --- | --- |",
        f"| test files | {len({t.path for t in old})} | {len({t.path for t in new})} |",
        f"| test functions | {of} | {nf} |",
        f"| {cases_are} | {oc} | {nc} |",
        f"| functions whose cases are not counted (not a literal) | {od} | {nd} |",
        f"| functions at the same path, class and name | {kept} | {kept} |",
        f"| functions no longer at their old place | {len(result)} | |",
        f"| functions at a place no old test held | | {nf - kept} |",
        "",
    ]
    tally: dict[str, int] = defaultdict(int)
    for f in result:
        tally[f.how] += 1
    lines += ["| what became of them | functions |", "| --- | --- |"]
    lines += [f"| {how} | {n} |" for how, n in sorted(tally.items())]
    lines.append("")
    groups: dict[tuple[str, str, str], list[Fate]] = defaultdict(list)
    for f in result:
        groups[(f.new.path if f.new else "—", f.how, f.old.path)].append(f)
    lines += [
        "| now in | how | from | cases before | test functions |",
        "| --- | --- | --- | --- | --- |",
    ]
    for (dest, how, src), group in sorted(groups.items()):
        cases = sum(f.old.cases for f in group)
        names = ", ".join(shown(f) for f in group)
        lines.append(f"| `{dest}` | {how} | `{src}` | {cases} | {names} |")
    lines.append("")
    lines += case_changes(old, new)
    return "\n".join(lines)


def case_changes(old: list[TestFn], new: list[TestFn]) -> list[str]:
    """Tests kept under the same name whose static case count fell."""
    now = {t.name: t for t in new}
    fell = [
        (t, now[t.name])
        for t in old
        if t.name in now and not t.dynamic and not now[t.name].dynamic
        if now[t.name].cases < t.cases
    ]
    if not fell:
        return ["No test kept under its name has fewer cases now.", ""]
    lines = ["| test | cases before | cases now |", "| --- | --- | --- |"]
    lines += [f"| `{b.where}` | {a.cases} | {b.cases} |" for a, b in fell]
    return [*lines, ""]


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("before", help="the commit before the change")
    parser.add_argument("after", nargs="?", default="HEAD", help="the commit after (HEAD)")
    parser.add_argument(
        "--collected",
        nargs=2,
        metavar=("BEFORE.txt", "AFTER.txt"),
        help="`pytest --collect-only -q` output of each side: cases as collected",
    )
    args = parser.parse_args(argv)
    revs = (
        git("rev-parse", "--short", args.before).strip(),
        git("rev-parse", "--short", args.after).strip(),
    )
    old, new = inventory(revs[0]), inventory(revs[1])
    cases_are = "static cases (a floor: literal parametrize lists only)"
    if args.collected:
        with open(args.collected[0], encoding="utf-8") as before_file:
            old = with_collected(old, collected(before_file.read()))
        with open(args.collected[1], encoding="utf-8") as after_file:
            new = with_collected(new, collected(after_file.read()))
        cases_are = "collected cases (pytest --collect-only)"
    result = fates(old, new, *revs)
    sys.stdout.write(markdown(old, new, result, revs=revs, cases_are=cases_are))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
