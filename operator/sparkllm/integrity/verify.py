"""``sparkllm verify-model``: the init container that proves a rank's model copy is whole.

Runs in every rank before SGLang starts (DESIGN.md, "Proof of service": ModelVerified).
It checks the directory's structure (``layout``), fingerprints every file (``checksums``)
against the optional sha256 manifest, prints the problems, and writes the compact
summary (``summary``) to the termination message, where the operator reads it for the
cross-rank comparison. Exit status: 0 verified, 1 a problem was found (each named on
stderr and in the summary), 2 a usage error.

Which files are fingerprinted: every regular file under the model directory, recursively,
except hidden ones (names starting with ``.``, such as a download tool's cache), which
are node-local by nature. Files up to 64 MiB, files in the manifest, and with
``--hash full`` every file, get a full sha256; other large files a sampled hash.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TextIO

from sparkllm.cli_args import add_options, from_namespace
from sparkllm.integrity.args import DEFAULT_TERMINATION_LOG, HashMode, VerifyModelArgs
from sparkllm.integrity.checksums import (
    FULL_HASH_BELOW_BYTES,
    ChecksumError,
    FileJob,
    fingerprint_files,
    manifest_mismatches,
    parse_manifest,
)
from sparkllm.integrity.layout import check_layout
from sparkllm.integrity.summary import ModelSummary, build_summary

EXIT_OK: Final = 0
EXIT_PROBLEM: Final = 1


@dataclass(frozen=True, slots=True)
class VerifyRequest:
    """What to verify and how."""

    model_dir: Path
    expected_shards: int
    expected_layers: int | None = None
    manifest: Mapping[str, str] | None = None
    hash_mode: HashMode = "sampled"
    threads: int = 4


def list_model_files(model_dir: Path) -> dict[str, int]:
    """{relative POSIX path: size} of every non-hidden regular file, recursively."""
    found: dict[str, int] = {}
    for root, dirs, files in os.walk(model_dir):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            if name.startswith("."):
                continue
            path = Path(root) / name
            if path.is_file():
                found[path.relative_to(model_dir).as_posix()] = path.stat().st_size
    return found


def _layer_problem(config: Mapping[str, object], expected: int | None) -> list[str]:
    if expected is None:
        return []
    layers = config.get("num_hidden_layers")
    if layers != expected:
        return [
            f"config.json num_hidden_layers is {layers!r}, the spec says {expected} "
            "(spec.model.numLayers)"
        ]
    return []


def verify_model(request: VerifyRequest, *, out: TextIO = sys.stdout) -> ModelSummary:
    """Verify the directory; a failed summary carries every problem found."""
    layout = check_layout(request.model_dir, expected_shards=request.expected_shards)
    for note in layout.notes:
        print(f"[verify-model] note: {note}", file=out, flush=True)
    problems = list(layout.problems) + _layer_problem(layout.config, request.expected_layers)
    if problems:
        return ModelSummary(ok=False, error="; ".join(problems))
    sizes = list_model_files(request.model_dir)
    manifest = request.manifest or {}
    jobs = [
        FileJob(
            name=name,
            size=size,
            full=request.hash_mode == "full" or name in manifest or size <= FULL_HASH_BELOW_BYTES,
        )
        for name, size in sorted(sizes.items())
    ]
    print(
        f"[verify-model] structure ok: {len(layout.shards)} shards, {len(jobs)} files, "
        f"{sum(sizes.values()) / 1e9:.2f} GB; fingerprinting with {request.threads} threads",
        file=out,
        flush=True,
    )
    try:
        fingerprints = fingerprint_files(request.model_dir, jobs, threads=request.threads, out=out)
    except ChecksumError as exc:
        return ModelSummary(ok=False, error=str(exc))
    mismatches = manifest_mismatches(manifest, fingerprints)
    if mismatches:
        return ModelSummary(ok=False, error="; ".join(mismatches))
    entries = {name: (sizes[name], fingerprints[name]) for name in sizes}
    return build_summary(entries=entries, shards=len(layout.shards))


def write_termination_message(path: str, message: str) -> None:
    """Write the summary where Kubernetes picks it up; warn (do not fail) elsewhere.

    The kubelet mounts ``/dev/termination-log`` into every container; outside Kubernetes
    it is absent, and the default path is then skipped rather than created in ``/dev``.
    """
    if path == DEFAULT_TERMINATION_LOG and not Path(path).exists():
        print(f"[verify-model] {path} absent (not in a pod): summary not written", flush=True)
        return
    try:
        Path(path).write_text(message, encoding="utf-8")
    except OSError as exc:
        print(f"[verify-model] warning: cannot write {path}: {exc}", file=sys.stderr)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add verify-model's options to ``parser`` (for the ``sparkllm`` CLI)."""
    add_options(parser, VerifyModelArgs)


def run(namespace: argparse.Namespace) -> int:
    """Run verify-model from parsed arguments; the exit status."""
    args = from_namespace(VerifyModelArgs, namespace)
    manifest = None
    if args.checksums is not None:
        try:
            text = args.checksums.read_text(encoding="utf-8")
            manifest = parse_manifest(text, source=str(args.checksums))
        except (OSError, ChecksumError) as exc:
            summary = ModelSummary(ok=False, error=f"checksum manifest: {exc}")
            return _finish(summary, termination_log=args.termination_log)
    request = VerifyRequest(
        model_dir=args.model_dir,
        expected_shards=args.expected_shards,
        expected_layers=args.expected_layers,
        manifest=manifest,
        hash_mode=args.hash,
        threads=max(1, args.jobs),
    )
    return _finish(verify_model(request), termination_log=args.termination_log)


def _finish(summary: ModelSummary, *, termination_log: str) -> int:
    message = summary.to_message()
    write_termination_message(termination_log, message)
    print(message, flush=True)
    if summary.ok:
        print(f"[verify-model] verified: digest {summary.digest}", flush=True)
        return EXIT_OK
    for problem in (summary.error or "").split("; "):
        print(f"[verify-model] problem: {problem}", file=sys.stderr, flush=True)
    return EXIT_PROBLEM


def verify_main(argv: Sequence[str] | None = None) -> int:
    """``sparkllm verify-model ...``; ``argv`` excludes the program and subcommand."""
    parser = argparse.ArgumentParser(
        prog="sparkllm verify-model",
        description="Verify a model directory (index, shards, config, tokenizer, hashes).",
    )
    configure_parser(parser)
    return run(parser.parse_args(argv))
