"""The launch check: the rank's own image judges the exact command line before SGLang starts.

Why: the operator's flag table (``sglang_flags.json``) is SGLang 0.5.23's, but users run
NVIDIA's, LMSYS's and community images, each with its own SGLang; flags are added and
removed between versions. Only the SGLang inside the image knows what it accepts. So
every rank pod runs, before the engine, an init container IN THE ENGINE IMAGE
(``spec.engine.image``, the same reference as the engine container, the same env but the
engine key) whose program, :data:`LAUNCH_CHECK_CODE`, feeds the engine container's own
arguments to that image's SGLang and writes what it said as JSON to the termination
message (:class:`LaunchResult`): ``ok``, ``version``, ``flag``, ``value``, ``error``. It
exits 1 on a refusal, so the engine never starts; the operator reads the message
(``reconcile/decide/versions.py``), reports ``LaunchChecked=False`` naming the flag, the
value and the version, and stops the replica until the spec changes (no restart loop).

What the program runs, version by version (every call exists since SGLang 0.3):

1. the version: ``importlib.metadata.version("sglang")``, else ``sglang.__version__``;
2. SGLang's own argument parser: ``argparse.ArgumentParser`` filled by
   ``sglang.srt.server_args.ServerArgs.add_cli_args`` and ``parse_args(argv)`` — an
   unknown flag, a value outside its choices, a value of the wrong type, a missing value;
   argparse's error line is the refusal (``flag``/``value`` are read from it);
3. ``prepare_server_args(argv)``: the launcher's own path (``--config`` merging, the
   ``ServerArgs`` record). In 0.5.23 building the record checks nothing more
   (``__post_init__`` is empty; resolution runs at launch); in 0.4.x/0.5.x before the
   namespaced records ``ServerArgs.__post_init__`` runs the value checks there. An
   ``AssertionError``/``ValueError``/``TypeError`` from this step is a refusal (SGLang's
   own checks); any other error (a GPU probe some versions make in ``__post_init__``,
   e.g. ``nvidia-smi`` absent: the init container has no GPU) is not a refusal: the
   result is ``ok`` with ``checked: "parser"`` and the error as a note.

Not run: ``ServerArgs.resolve_once`` and ``check_server_args`` (0.5.23). They read the
resolved record, which needs the device and the model's config: without the GPU the init
container does not have, ``check_server_args`` on the unresolved record refuses valid
command lines (a PP>1 line fails "not compatible with overlap schedule" because the
overlap default is resolved later). What only they refuse is found at engine start, as
before (the restart policy applies).

Pure here (strings and parsing); the program runs in the image.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Final

LAUNCH_CHECK_CONTAINER: Final = "launch-check"
TERMINATION_LOG_ENV: Final = "SPARKLLM_TERMINATION_LOG"
"""Where the program writes its JSON (default the kubelet's ``/dev/termination-log``);
the dev cluster's harness points it at its own file."""

LAUNCH_CHECK_CODE: Final = r"""
import argparse, contextlib, io, json, os, re, sys
argv = sys.argv[1:]
out = {"ok": False, "version": None, "flag": None, "value": None, "error": None, "checked": None}
def refusal(text):
    out["error"] = text[:1500]
    m = re.search(r"unrecognized arguments: (.*)", text)
    if m:
        words = m.group(1).split()
        first = words[0] if words else ""
        if "=" in first:
            out["flag"], out["value"] = first.split("=", 1)
        else:
            out["flag"] = first
            if len(words) > 1 and not words[1].startswith("-"):
                out["value"] = words[1]
        return
    m = re.search(r"argument ([^:\s]+): (.*)", text)
    if m:
        out["flag"] = m.group(1).split("/")[0]
        v = re.search(r"invalid [^:]*: '(.*?)'", m.group(2))
        out["value"] = v.group(1) if v else None
        return
    m = re.search(r"arguments are required: (\S+)", text)
    if m:
        out["flag"] = m.group(1).split("/")[0].rstrip(",")
def parse(call):
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            call()
        return True
    except SystemExit as exc:
        lines = [l for l in err.getvalue().splitlines() if l.strip()]
        refusal(lines[-1].split("error: ", 1)[-1] if lines else "argparse exit %s" % exc.code)
        return False
try:
    try:
        from importlib.metadata import version
        out["version"] = version("sglang")
    except Exception:
        import sglang
        out["version"] = str(getattr(sglang, "__version__", "")) or None
    from sglang.srt import server_args as sa
    def by_parser():
        p = argparse.ArgumentParser(prog="sglang serve")
        sa.ServerArgs.add_cli_args(p)
        p.parse_args(argv)
    if parse(by_parser):
        out["checked"] = "parser"
        try:
            with contextlib.redirect_stdout(io.StringIO()):
                ok = parse(lambda: sa.prepare_server_args(list(argv)))
            if ok:
                out["ok"], out["checked"] = True, "server_args"
        except (AssertionError, ValueError, TypeError) as exc:
            out["error"] = ("%s: %s" % (type(exc).__name__, exc))[:1500]
        except Exception as exc:
            out["ok"] = True
            note = "not checked beyond the parser: %s: %s" % (type(exc).__name__, exc)
            out["error"] = note[:1500]
except Exception as exc:
    out["error"] = ("%s: %s" % (type(exc).__name__, exc))[:1500]
text = json.dumps(out)
try:
    with open(os.environ.get("SPARKLLM_TERMINATION_LOG", "/dev/termination-log"), "w") as f:
        f.write(text)
except OSError:
    pass
print(text)
sys.exit(0 if out["ok"] else 1)
"""
"""``python3 -c`` program: check ``sys.argv[1:]`` with the image's SGLang (module docstring)."""

LAUNCH_CHECK_COMMAND: Final = ("python3", "-c", LAUNCH_CHECK_CODE)


@dataclass(frozen=True)
class LaunchResult:
    """What one rank's launch check reported (its termination message)."""

    ok: bool
    version: str | None = None
    flag: str | None = None
    value: str | None = None
    error: str | None = None
    checked: str | None = None  # "server_args", "parser", or None when nothing ran

    def describe(self, *, image: str = "") -> str:
        """One line for a condition: what was refused, by which SGLang."""
        who = f"SGLang {self.version or '(version unknown)'}" + (f" in {image}" if image else "")
        if self.ok:
            return f"{who} accepts the command line"
        what = ""
        if self.flag:
            what = f" {self.flag}" + (f" {self.value}" if self.value is not None else "")
        return f"{who} refuses{what}: {self.error or 'no reason given'}"


def parse_result(message: str | None, exit_code: int | None) -> LaunchResult | None:
    """The rank's result from its init container's termination message; None while it has
    not ended. A message that is not the program's JSON (the image has no ``python3``, the
    container was killed) is a refusal quoting it, when the exit code is not 0."""
    if message is None and exit_code is None:
        return None
    try:
        data = json.loads(message or "")
    except ValueError:
        data = None
    if not isinstance(data, dict):
        text = (message or "").strip()[:500] or "no termination message"
        if exit_code == 0:
            return LaunchResult(ok=True, error=f"unreadable result: {text}")
        return LaunchResult(ok=False, error=f"exit code {exit_code}: {text}")

    def field(key: str) -> str | None:
        value = data.get(key)
        return None if value is None else str(value)

    return LaunchResult(
        ok=bool(data.get("ok")) and exit_code in (0, None),
        version=field("version"),
        flag=field("flag"),
        value=field("value"),
        error=field("error"),
        checked=field("checked"),
    )


__all__ = [
    "LAUNCH_CHECK_CODE",
    "LAUNCH_CHECK_COMMAND",
    "LAUNCH_CHECK_CONTAINER",
    "TERMINATION_LOG_ENV",
    "LaunchResult",
    "parse_result",
]
