"""The one vocabulary of reasons: for condition transitions and for Kubernetes Events.

Reasons are CamelCase words that machines match on (alerts, dashboards, ``kubectl get
events --field-selector reason=GangRestart``), so they are an API: spelled once, here,
and never composed at runtime. A module that needs a new reason adds it here with a
line saying when it is used; the message, not the reason, carries the specifics.
"""

from enum import StrEnum


class Reason(StrEnum):
    """Why a condition changed or an Event was emitted."""

    # --- spec and planning -------------------------------------------------------------
    INVALID_SPEC = "InvalidSpec"  # the spec cannot work; the message names the field
    POLICY_DENIED = "PolicyDenied"  # the spec leaves the administrator's policy (chart values)
    CAPACITY_FITS = "CapacityFits"  # CapacityPlanned=True: every rank fits in memory
    CAPACITY_EXCEEDED = "CapacityExceeded"  # CapacityPlanned=False: a rank would not fit
    CAPACITY_UNKNOWN = "CapacityUnknown"  # CapacityPlanned=Unknown: spec.model.weightsGB unset

    # --- placement and scaling ----------------------------------------------------------
    INSUFFICIENT_NODE_GROUPS = "InsufficientNodeGroups"  # no free group for a replica
    NODE_GROUP_INVALID = "NodeGroupInvalid"  # a group's nodes are missing or mislabelled
    NODE_GROUP_IN_USE = "NodeGroupInUse"  # another InferenceCluster holds the group's nodes
    UNSCHEDULABLE = "Unschedulable"  # a rank pod stayed Pending: the scheduler's message
    SCALING_UP = "ScalingUp"  # a replica is being added
    SCALING_DOWN = "ScalingDown"  # the highest replica is drained and removed
    ROLLING_UPDATE = "RollingUpdate"  # a spec change is applied replica by replica
    RECONCILED = "Reconciled"  # Progressing=False: desired state reached

    # --- replica lifecycle --------------------------------------------------------------
    RANKS_STARTING = "RanksStarting"  # ranks are pulling, verifying or loading
    STARTUP_TIMEOUT = "StartupTimeout"  # not ready within restartPolicy.startupGraceSeconds
    REPLICA_READY = "ReplicaReady"  # Event: a replica started serving
    START_STAGE = "StartStage"  # Event: a starting replica's ranks moved to a new stage
    ALL_REPLICAS_READY = "AllReplicasReady"  # Ready=True
    REPLICAS_NOT_READY = "ReplicasNotReady"  # Ready=False: fewer ready than desired
    SCALED_TO_ZERO = "ScaledToZero"  # Ready=False because replicas is 0

    # --- failures and restarts ----------------------------------------------------------
    RANK_FAILED = "RankFailed"  # a rank's container exited or its pod failed
    RANK_DELETED = "RankDeleted"  # a rank's pod disappeared
    NODE_NOT_READY = "NodeNotReady"  # a rank's node went NotReady
    NODE_MISSING = "NodeMissing"  # a rank's node was deleted
    GANG_RESTART = "GangRestart"  # Event: a whole replica is being restarted
    NODE_FAILOVER = "NodeFailover"  # Event: a replica moved to a spare node group
    NODE_QUARANTINED = "NodeQuarantined"  # Event: a failing node is kept from replicas
    QUARANTINE_LIFTED = "QuarantineLifted"  # Event: settled or lifted by annotation
    RESTART_BACKOFF = "RestartBackoff"  # waiting before the next gang restart
    RESTART_BUDGET_EXHAUSTED = "RestartBudgetExhausted"  # past maxRestartsPerHour: Degraded
    REPLICA_DEGRADED = "ReplicaDegraded"  # Degraded=True for another replica-level cause
    NOT_DEGRADED = "NotDegraded"  # Degraded=False

    # --- proof of service ---------------------------------------------------------------
    MODEL_FILES_VERIFIED = "ModelFilesVerified"  # ModelVerified=True
    MODEL_INCOMPLETE = "ModelIncomplete"  # shards, index or tokenizer files missing
    CHECKSUM_MISMATCH = "ChecksumMismatch"  # a file's hash differs from the manifest/ranks
    VERIFICATION_PENDING = "VerificationPending"  # ModelVerified/ConfigApplied=Unknown
    CONFIG_MATCHES = "ConfigMatches"  # ConfigApplied=True
    NETWORK_CHECKS_PASSED = "NetworkChecksPassed"  # NetworkVerified=True
    NETWORK_CHECK_FAILED = "NetworkCheckFailed"  # a node failed a network preflight check
    MEMORY_AVAILABLE = "MemoryAvailable"  # MemoryVerified=True
    MEMORY_CHECK_FAILED = "MemoryCheckFailed"  # a node lacks free memory or is under pressure
    CONFIG_MISMATCH = "ConfigMismatch"  # rank 0 runs with settings the spec did not ask for
    LAUNCH_ACCEPTED = "LaunchAccepted"  # LaunchChecked=True: each rank's SGLang accepts its args
    LAUNCH_REFUSED = "LaunchRefused"  # LaunchChecked=False: the image's SGLang refuses a flag
    IMAGES_MATCH = "ImagesMatch"  # ImagesConsistent=True: one digest and version per replica
    DIGEST_SPLIT = "DigestSplit"  # a replica's ranks pulled different digests (or versions)
    REPLICAS_DIFFER = "ReplicasDiffer"  # replicas run different digests (no rolling update)
    BENCHMARK_COMPLETED = "BenchmarkCompleted"  # Event: results written to status.benchmark
    BENCHMARK_FAILED = "BenchmarkFailed"  # Event: the benchmark job failed
    ACCEPTANCE_PASSED = "AcceptancePassed"  # Event: no checklist row failed (status.acceptance)
    ACCEPTANCE_FAILED = "AcceptanceFailed"  # Event: a row failed, or the run could not run
    BENCHMARK_WAITING = "BenchmarkWaiting"  # Event: a benchmark waits for an acceptance run
    ACCEPTANCE_WAITING = "AcceptanceWaiting"  # Event: an acceptance run waits for a benchmark

    # --- model staging (spec.model.source; decide/staging.py) ----------------------------
    STAGING = "Staging"  # ModelStaged=False: a node group's copies are under way
    STAGED = "Staged"  # ModelStaged=True; Event: a node group holds verified copies
    STAGING_STARTED = "StagingStarted"  # Event: a node group's download began
    STAGING_CLEANED = "StagingCleaned"  # Event: a group's older copies removed (the rule)
    # ModelStaged=False and a Warning Event: a node's stage failed (staging.plan.StageReason)
    UNAUTHORIZED = "Unauthorized"  # the source refused the credentials
    NOT_FOUND = "NotFound"  # repository, revision, bucket, object or URL missing
    DISK_FULL = "DiskFull"  # not enough free space at the target
    HASH_MISMATCH = "HashMismatch"  # a file differs after one re-fetch
    CONNECTION_LOST = "ConnectionLost"  # the source or peer went away, retries exhausted
    VERIFICATION_FAILED = "VerificationFailed"  # verify-model refused the staged copy
    INVALID_SOURCE = "InvalidSource"  # the source answered something unusable
    PEER_UNAVAILABLE = "PeerUnavailable"  # the node to copy from served no finished copy
    STAGE_FAILED = "StageFailed"  # the staging pod failed without a progress record

    # --- dependencies -------------------------------------------------------------------
    SECRET_MISSING = "SecretMissing"  # a referenced Secret or key does not exist
    # Monitored (spec.monitoring.serviceMonitor): the PodMonitors are applied; or not, as
    # the cluster does not serve PodMonitor or the operator may not list them; or off.
    MONITORS_APPLIED = "MonitorsApplied"
    MONITORING_UNAVAILABLE = "MonitoringUnavailable"
    MONITORING_DISABLED = "MonitoringDisabled"
    API_NOT_SERVED = "APINotServed"  # Exposed=False: spec.exposure's CRDs are not installed
    API_SERVED = "APIServed"  # Exposed=True: every API spec.exposure needs is served
    # UpdatePending=True: a new operator version renders the rank pods otherwise; it waits
    OPERATOR_UPDATE_PENDING = "OperatorUpdatePending"
    # Event: the installed CRD lacks fields this operator knows (reconcile/crd_check.py)
    CRD_OUTDATED = "CRDOutdated"
    RANK_PODS_CURRENT = "RankPodsCurrent"  # UpdatePending=False: the pods have the rendering
    # Event: sparkllm.io/restart has a value other than "now"; nothing restarts, it is removed
    RESTART_ANNOTATION_REFUSED = "RestartAnnotationRefused"
    # Event: sparkllm.io/lift-quarantine names a node that is not quarantined; it is removed
    LIFT_QUARANTINE_UNMATCHED = "LiftQuarantineUnmatched"
