"""``sparkllm stage-model --clean``: the cleaning rule on real directories.

The copies are made by the real stage (a peer copy from ``--serve``'s server, plain HTTP
on 127.0.0.1) under ``<tmp>/.sparkllm-models/toy/<digest>``, each with its own stagedAt
(the stage's wall clock injected); an unfinished ``.staging/<digest>`` is what a stage
that failed part-way leaves. The rule itself is a pure function, tested on names.
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sparkllm.cli import main
from sparkllm.staging import clean
from sparkllm.staging.args import COPIES_DIR
from sparkllm.staging.clean import Entry, Kind, clean_copies, plan_clean
from sparkllm.staging.errors import StageError
from sparkllm.staging.plan import StageReason
from sparkllm.staging.progress import Progress
from sparkllm.staging.serve import MANIFEST_FILE
from sparkllm.staging.stage import StageRequest, stage_model, staging_path
from tests.unit.staging_fixtures import peer_server, seed_copy, toy_model

SHARD = "model-00002-of-00003.safetensors"


@pytest.fixture
def peer(tmp_path: Path) -> Iterator[str]:
    seed = seed_copy(tmp_path / "seed", toy_model(tmp_path / "origin"))
    with peer_server(seed) as url:
        yield url


def copy(peer: str, target: Path, *, at: float) -> Path:
    """A finished copy at ``target``, staged at ``at`` (the manifest's stagedAt)."""
    request = StageRequest(target=target, peer=peer, expected_shards=3, wall=lambda: at)
    stage_model(request, Progress(out=io.StringIO(), interval=0.0))
    return target


def copies(peer: str, models: Path, **staged_at: float) -> list[Path]:
    """Finished copies ``models/<name>``, staged in the order given, at the times given."""
    return [copy(peer, models / name, at=at) for name, at in staged_at.items()]


def partial(tmp_path: Path, target: Path) -> Path:
    """What a stage that failed part-way leaves: ``.staging/<digest>`` with some files."""
    files = toy_model(tmp_path / "origin-bad")
    seed = seed_copy(tmp_path / "seed-bad", files, wrong_sha=SHARD)
    with peer_server(seed) as url, pytest.raises(StageError):
        copy(url, target, at=0.0)
    assert not target.exists()
    return staging_path(target)


def size(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file())


def run_clean(
    target: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any], list[str]]:
    code = main(["stage-model", "--clean", "--target", str(target), *extra])
    captured = capsys.readouterr()
    return code, json.loads(captured.out.strip().splitlines()[-1]), captured.err.splitlines()


def test_old_copies_and_partial_downloads_go_the_newest_previous_one_stays(
    tmp_path: Path, peer: str, capsys: pytest.CaptureFixture[str]
) -> None:
    models = tmp_path / COPIES_DIR / "toy"
    oldest, previous, current = copies(peer, models, d1=100.0, d2=200.0, d3=300.0)
    assert json.loads((current / MANIFEST_FILE).read_text())["stagedAt"] == 300.0
    unfinished = partial(tmp_path, models / "d4")
    foreign = models / "notes"
    foreign.mkdir()
    (foreign / "README").write_text("someone else's")
    outside = copy(peer, tmp_path / "elsewhere" / "d0", at=50.0)
    (models / "link").symlink_to(outside)  # a copy reached by a symlink: not followed
    removed = [{"path": str(p), "bytes": size(p)} for p in (unfinished, oldest)]

    code, record, err = run_clean(current, capsys, "--keep-previous", "1")

    assert (code, err) == (0, [])
    assert record["event"] == "cleaned"
    assert record["removed"] == removed
    assert record["bytesFreed"] == sum(r["bytes"] for r in removed) > 0
    assert record["kept"] == [{"path": str(p), "bytes": size(p)} for p in (current, previous)]
    assert [s["path"] for s in record["skipped"]] == [str(models / "link"), str(foreign)]
    assert all("not a staged copy" in s["why"] for s in record["skipped"])
    assert sorted(p.name for p in models.iterdir()) == [".staging", "d2", "d3", "link", "notes"]
    assert list((models / ".staging").iterdir()) == []
    assert (outside / MANIFEST_FILE).is_file()
    assert (foreign / "README").is_file()


def test_keep_previous_zero_leaves_the_target_alone_and_falls_back_to_mtime(
    tmp_path: Path,
    peer: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    models = tmp_path / COPIES_DIR / "toy"
    current, older, newer = copies(peer, models, b=100.0, a=500.0, c=0.0)
    for manifest, mtime in ((older / MANIFEST_FILE, 1000.0), (newer / MANIFEST_FILE, 2000.0)):
        recorded = json.loads(manifest.read_text())
        del recorded["stagedAt"]  # a manifest written before stagedAt: its mtime counts
        manifest.write_text(json.dumps(recorded))
        os.utime(manifest, (mtime, mtime))

    code, record, _ = run_clean(current, capsys, "--keep-previous", "1")
    assert code == 0
    assert [k["path"] for k in record["kept"]] == [str(current), str(newer)]
    assert [r["path"] for r in record["removed"]] == [str(older)]

    monkeypatch.chdir(models)  # a relative --target
    code, record, _ = run_clean(Path(current.name), capsys, "--keep-previous", "0")
    assert code == 0
    assert [r["path"] for r in record["removed"]] == [str(newer)]
    assert sorted(p.name for p in models.iterdir()) == [".staging", "b"]  # .staging empty


def test_a_target_that_is_not_a_finished_copy_is_refused_and_nothing_moves(
    tmp_path: Path, peer: str, capsys: pytest.CaptureFixture[str]
) -> None:
    models = tmp_path / COPIES_DIR / "toy"
    old = copy(peer, models / "d1", at=1.0)
    unfinished = partial(tmp_path, models / "d2")
    progress_file = tmp_path / "progress.json"
    for target in (models / "d2", unfinished, tmp_path / "d1"):
        code, record, err = run_clean(target, capsys, "--progress-file", str(progress_file))
        assert code == 1
        assert len(err) == 1
        assert err[0].startswith(f"stage-model: failed: InvalidSource: --clean: {target} is not")
        assert (record["event"], record["reason"], record["stage"]) == (
            "failed",
            "InvalidSource",
            "Failed",
        )
        assert json.loads(progress_file.read_text()) == record
    assert (old / MANIFEST_FILE).is_file()
    assert any(unfinished.iterdir())


def test_a_copy_beside_another_models_copy_is_not_cleaned_outside_the_layout(
    tmp_path: Path, peer: str
) -> None:
    one = copy(peer, tmp_path / "models" / "one", at=1.0)
    other = copy(peer, tmp_path / "models" / "other", at=2.0)
    with pytest.raises(StageError) as caught:
        clean_copies(one, keep_previous=0)
    assert caught.value.reason is StageReason.INVALID_SOURCE
    assert COPIES_DIR in str(caught.value)
    assert (other / MANIFEST_FILE).is_file()


def test_a_run_killed_half_way_is_finished_by_the_next(
    tmp_path: Path, peer: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    models = tmp_path / COPIES_DIR / "toy"
    *old, current = copies(peer, models, d1=1.0, d2=2.0, d3=3.0, d9=9.0)
    sizes = [size(p) for p in old]
    removals: list[Path] = []
    real_remove = clean._remove

    def killed_after_one(path: Path) -> None:
        removals.append(path)
        if len(removals) > 1:
            raise KeyboardInterrupt  # the process is killed mid-way
        real_remove(path)

    monkeypatch.setattr(clean, "_remove", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        clean_copies(current, keep_previous=0)
    # every old copy left its place at once (renamed); one was deleted, two wait in .trash
    assert sorted(p.name for p in models.iterdir()) == [".staging", ".trash", "d9"]
    assert sorted(p.name for p in (models / ".trash").iterdir()) == ["d2", "d3"]

    monkeypatch.setattr(clean, "_remove", real_remove)
    code, record, _ = run_clean(current, capsys, "--keep-previous", "0")
    assert code == 0
    assert [r["path"] for r in record["removed"]] == [
        str(models / ".trash" / "d2"),
        str(models / ".trash" / "d3"),
    ]
    assert record["bytesFreed"] == sizes[1] + sizes[2]
    assert sorted(p.name for p in models.iterdir()) == [".staging", "d9"]


def test_hard_linked_files_count_once_and_only_when_every_link_goes(tmp_path: Path) -> None:
    models = tmp_path / COPIES_DIR / "toy"
    current, old = models / "new", models / "old"
    for copy_dir in (current, old):
        copy_dir.mkdir(parents=True)
        (copy_dir / MANIFEST_FILE).write_text("{}")
    cache = models / ".staging" / "hub-cache"
    cache.mkdir(parents=True)
    (cache / "blob-a").write_bytes(b"a" * 1000)  # only in the old copy: freed once
    os.link(cache / "blob-a", old / "a.safetensors")
    (cache / "blob-b").write_bytes(b"b" * 300)  # also in the current copy: not freed
    os.link(cache / "blob-b", old / "b.safetensors")
    os.link(cache / "blob-b", current / "b.safetensors")

    report = clean_copies(current, keep_previous=0)

    by_path = {Path(r["path"]).name: r["bytes"] for r in report.removed}
    assert by_path == {"hub-cache": 1000, "old": 2}  # the old manifest's 2 bytes
    assert report.bytes_freed == 1002
    assert (current / "b.safetensors").read_bytes() == b"b" * 300


def test_clean_takes_no_source_and_no_negative_count(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = str(tmp_path / COPIES_DIR / "toy" / "d1")
    for extra in (["--peer", "http://127.0.0.1:1"], ["--keep-previous", "-1"], ["--serve"]):
        assert main(["stage-model", "--clean", "--target", target, *extra]) == 2
        assert "--clean takes --target and --keep-previous" in capsys.readouterr().err


def entry(name: str, kind: Kind = Kind.FINISHED, at: float = 0.0) -> Entry:
    return Entry(name=name, kind=kind, staged_at=at)


@pytest.mark.parametrize(
    ("keep", "kept", "removed"),
    [
        (0, ["t", ".staging/t"], [".staging/x", ".trash/y", "a", "b", "c"]),
        (1, ["t", "c", ".staging/t"], [".staging/x", ".trash/y", "a", "b"]),
        (2, ["t", "c", "b", ".staging/t"], [".staging/x", ".trash/y", "a"]),
        (9, ["t", "c", "b", "a", ".staging/t"], [".staging/x", ".trash/y"]),
    ],
)
def test_the_rule_keeps_the_newest_previous_copies(
    keep: int, kept: list[str], removed: list[str]
) -> None:
    entries = [
        entry("a", at=1.0),
        entry("b", at=5.0),
        entry("c", at=5.0),  # a tie: by name
        entry("t", at=0.0),  # the target: kept whatever its age
        entry(".staging/t", Kind.UNFINISHED),  # the target's own: kept
        entry(".staging/x", Kind.UNFINISHED),
        entry(".trash/y", Kind.TRASH),
        entry("notes", Kind.FOREIGN),
    ]
    plan = plan_clean(target="t", entries=entries, keep_previous=keep)
    assert [e.name for e in plan.keep] == kept
    assert [e.name for e in plan.remove] == removed
    assert [e.name for e in plan.skip] == ["notes"]
    with pytest.raises(ValueError, match="0 or more"):
        plan_clean(target="t", entries=entries, keep_previous=-1)
