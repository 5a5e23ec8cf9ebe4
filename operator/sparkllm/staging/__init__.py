"""Model staging (issue 31): the model gets onto a node group's nodes, once, verified.

- ``plan``: pure — which node downloads, the fan-out order, each node's state machine and
  the failure reasons status and Events use.
- ``transfer``: the resumable, checked file loop every source shares.
- ``http_fetch``, ``s3``, ``hub``: the sources (HTTPS URLs and peers; S3-compatible
  storage through the MinIO client; the Hugging Face Hub through ``huggingface_hub``).
- ``serve``: a finished copy served to peers (Range requests, a manifest).
- ``stage``: one node's stage (space check, staging directory, verify-model, atomic move).
- ``clean``: the rule that removes a model's old copies beside the current one (``--clean``).
- ``progress``: JSON-line progress records; ``command``: ``sparkllm stage-model``.
"""
