"""``sparkllm stage-model``: stage a model onto this node, or serve a finished copy.

Two modes, one command (phase 2's Jobs run it on each node of a group, as
``plan.plan_group`` orders them):

- stage: ``--target DIR`` and either ``--source JSON`` (``spec.model.source`` in its wire
  form, on the node that downloads) or ``--peer URL`` (another node's ``--serve``).
  Progress is JSON lines on stdout and, with ``--progress-file``, the latest line there.
  Exit 0 staged (or already staged); 1 failed, with one line on stderr::

      stage-model: failed: HashMismatch: model-00002-of-00003.safetensors: sha256 ...

  and a ``failed`` progress record carrying the same reason.
- serve: ``--serve --target DIR --listen ADDR:PORT``: serve a finished copy to peers
  until SIGTERM, then print ``{"event": "served", "bytesSent": {<peer address>: bytes}}``
  (the bytes on each link).
- clean: ``--clean --target DIR --keep-previous N``: remove the model's other copies
  beside the finished copy ``DIR`` by the rule in ``staging.clean``; one line on stdout,
  ``{"event": "cleaned", "removed": [...], "kept": [...], "skipped": [...],
  "bytesFreed": N}``. A target that is not a finished copy fails as a stage does (exit 1).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path
from typing import Final

from pydantic import ValidationError

from sparkllm.api.model_staging import ModelSourceSpec
from sparkllm.cli_args import add_options, from_namespace
from sparkllm.staging.args import StageModelArgs
from sparkllm.staging.clean import clean_copies
from sparkllm.staging.errors import StageError
from sparkllm.staging.plan import StageReason, StageState
from sparkllm.staging.progress import Progress
from sparkllm.staging.serve import PeerServer
from sparkllm.staging.stage import StageRequest, stage_model

EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_options(parser, StageModelArgs)


def parse_source(text: str) -> ModelSourceSpec:
    """``--source``: JSON text, or ``@FILE``; StageError InvalidSource naming the field."""
    try:
        raw = Path(text[1:]).read_text(encoding="utf-8") if text.startswith("@") else text
        return ModelSourceSpec.model_validate_json(raw)
    except OSError as exc:
        raise StageError(StageReason.INVALID_SOURCE, f"--source {text}: {exc}") from exc
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "source"
        raise StageError(StageReason.INVALID_SOURCE, f"--source {where}: {first['msg']}") from exc


def run(namespace: argparse.Namespace) -> int:
    args = from_namespace(StageModelArgs, namespace)
    if args.clean:
        return _clean(args)
    if args.serve:
        return _serve(args)
    progress = Progress(file=args.progress_file)
    try:
        request = StageRequest(
            target=args.target,
            source=parse_source(args.source) if args.source is not None else None,
            peer=args.peer,
            expected_shards=args.expected_shards,
            expected_layers=args.expected_layers,
            ca_file=args.ca_file,
            local_address=args.local_address,
            environ=dict(os.environ),
        )
        stage_model(request, progress)
    except StageError as exc:
        return _failed(progress, exc)
    return EXIT_OK


def _failed(progress: Progress, exc: StageError) -> int:
    """A failed record on stdout and one line with the reason on stderr: exit 1."""
    progress.failed(exc.reason, exc.detail)
    print(f"stage-model: failed: {exc}", file=sys.stderr, flush=True)
    return EXIT_FAILED


def _clean(args: StageModelArgs) -> int:
    """The cleaning rule beside ``--target``: one ``cleaned`` record, or one failed line."""
    alone = args.source is None and args.peer is None and not args.serve
    if not alone or args.keep_previous < 0:
        print(
            "stage-model: --clean takes --target and --keep-previous N (0 or more) only",
            file=sys.stderr,
            flush=True,
        )
        return EXIT_USAGE
    progress = Progress(out=sys.stdout, file=args.progress_file)  # stdout as it is now
    try:
        report = clean_copies(args.target, keep_previous=args.keep_previous)
    except StageError as exc:
        return _failed(progress, exc)
    progress.stage = StageState.READY  # the target stays this node's finished copy
    progress.emit("cleaned", **report.record())
    return EXIT_OK


def _serve(args: StageModelArgs) -> int:
    """Serve until SIGTERM/SIGINT; then one line with the bytes sent to each peer."""
    host, _, port = args.listen.rpartition(":")
    server = PeerServer(args.target, (host, int(port)))
    address = f"{host}:{server.server_port}"
    line = {"event": "serving", "address": address, "files": len(server.files)}
    print(json.dumps(line), flush=True)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    print(json.dumps({"event": "served", "bytesSent": server.bytes_sent}), flush=True)
    return EXIT_OK


def _interrupt(signum: int, frame: object) -> None:
    del signum, frame
    raise KeyboardInterrupt
