"""``sparkllm bench --accept``: the documents' acceptance checklist, run as one command.

"Not just HTTP 200": the checklist reads what the engine answered and what the cluster
recorded, and every row says pass, fail or not measured with its basis. Modules:

- ``rows``: one row of the report (verdict, basis, why).
- ``sse``: a strict reader of one streamed answer.
- ``functional``: acceptance point 3 (deterministic answer, streaming, reasoning, a
  function call, unsupported tool forms refused by the front door).
- ``load``: Scale8 (closed loop), Arrival (Poisson, open loop) and the soak.
- ``regression``: per-scenario comparison with an accepted baseline, per-metric tolerance.
- ``resources``: acceptance point 5 (restarts from status; PSI, swap, OOM, XID, RDMA from
  Prometheus over the run window).
- ``run``: the sections in order; ``report``: JSON, Markdown, the status summary.
- ``cli``: the ``--accept`` options of ``sparkllm bench``.
"""
