"""The cleaning rule for staged copies: once the roll is complete, keep two per node.

The rule (docs/model-staging.md, "Old copies"): once every replica's rank pods run the
current digest's copy and are Ready, and the gateway's pods too, one clean Job per node
of each replica's group runs ``sparkllm stage-model --clean --target <the current copy>
--keep-previous 1``: beside the copy in use it keeps the newest other finished copy (so
a revert to the previous revision needs no download: "already staged") and removes the
older ones, and every unfinished staging directory of another digest.

Why only then: a copy is never removed while a pod mounts it, and until the roll is
complete some replica (or the gateway) still runs the copy before; the Jobs run once per
digest — a succeeded clean Job is the record, not re-run each pass — and go with the
digest's other Jobs at the next source change (decide/staging.py). Why a Job per node and
not a step of the stage: only the operator sees when the last pod left the old copy.
Pure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from sparkllm.api import InferenceCluster, Reason
from sparkllm.kube.kinds import JSON
from sparkllm.reconcile.decide.actions import PendingEvent, Removal
from sparkllm.reconcile.decide.staging_copies import LiveCopies
from sparkllm.reconcile.decide.staging_seen import StagingJob, job_removal
from sparkllm.render.model_staging import clean_args, render_staging_job, staging_job_name
from sparkllm.render.product_image import ProductImage


@dataclass(frozen=True)
class CleanOutcome:
    """The clean Jobs to make or retry, and each group's bytes freed once all succeeded."""

    create: tuple[JSON, ...] = ()
    delete: tuple[Removal, ...] = ()
    freed: Mapping[int, int] = field(default_factory=dict)  # replica -> bytes freed
    events: tuple[PendingEvent, ...] = ()
    busy: bool = False  # a clean Job runs or is going: look again soon
    failures: tuple[str, ...] = ()  # "<node>: <why>" of each failed clean Job


def roll_complete(digest: str, replicas: Sequence[int], copies: LiveCopies) -> bool:
    """Every replica's rank pods on ``digest`` and Ready, and the gateway rolled onto it."""
    return (
        bool(replicas)
        and all(copies.pods.get(r) == digest and r in copies.ready for r in replicas)
        and copies.gateway == digest
        and copies.gateway_rolled
    )


def decide_clean(
    ic: InferenceCluster,
    *,
    groups: Mapping[int, Sequence[str]],
    live: Mapping[str, StagingJob],
    digest: str,
    image: ProductImage,
    complete: bool,
    force: bool,
    freed_before: Mapping[int, int],
) -> CleanOutcome:
    """Per group: its clean Jobs made once the roll is ``complete`` (a later restart of a
    replica does not undo them), a failed one made again at ``sparkllm.io/restart=now``,
    and ``StagingCleaned`` the pass its last one succeeded; a failed one is named in
    ModelStaged's message (:func:`with_clean_failures`), no Event per pass."""
    cluster = ic.metadata.name
    create: list[JSON] = []
    delete: list[Removal] = []
    freed: dict[int, int] = {}
    events: list[PendingEvent] = []
    failures: list[str] = []
    busy = False
    for replica in sorted(groups):
        nodes = tuple(groups[replica])
        names = [
            staging_job_name(
                cluster, replica=replica, rank=rank, role="clean", digest=digest, node=node
            )
            for rank, node in enumerate(nodes)
        ]
        jobs = [live.get(name) for name in names]
        if not complete and all(job is None for job in jobs):
            continue
        for rank, (node, job) in enumerate(zip(nodes, jobs, strict=True)):
            if job is None:
                made = render_staging_job(
                    ic, replica=replica, rank=rank, node=node, role="clean",
                    args=clean_args(ic), digest=digest, image=image,
                )  # fmt: skip
                create.append(made)
                busy = True
            elif job.outcome == "failed" and force and not job.deleting:
                delete.append(job_removal(job))
                busy = True
            elif job.outcome == "failed":
                failures.append(f"{node}: {job.detail or 'the clean pod failed'}")
            elif job.outcome == "running" or job.deleting:
                busy = True
        if all(job is not None and job.outcome == "succeeded" for job in jobs):
            before = freed_before.get(replica)
            total = sum(job.bytes_freed or 0 for job in jobs if job is not None)
            freed[replica] = before if before is not None else total
            if before is None:
                on = ", ".join(nodes)
                message = (
                    f"replica {replica}: older model copies removed on {on} "
                    f"({total} bytes freed); kept {digest} and the copy before it"
                    if total
                    else f"replica {replica}: no older model copy to remove on {on}; "
                    f"kept {digest} (and the copy before it, if any)"
                )
                events.append(PendingEvent(False, Reason.STAGING_CLEANED, message))
    return CleanOutcome(
        create=tuple(create), delete=tuple(delete), freed=freed, events=tuple(events),
        busy=busy, failures=tuple(failures),
    )  # fmt: skip


def with_clean_failures(staged: JSON, failures: Sequence[str]) -> JSON:
    """ModelStaged (True: every copy is in place) also says which clean Jobs failed: the
    old copies stay on those nodes until the Job is deleted (the next pass makes it again,
    the roll being complete) or ``sparkllm.io/restart=now`` deletes it."""
    if not failures:
        return staged
    note = (
        f"; removing the older copies failed on {'; '.join(failures)} (they stay on disk; "
        "delete the failed clean Job to run it again)"
    )
    return {**staged, "message": (str(staged.get("message", "")) + note)[:32768]}
