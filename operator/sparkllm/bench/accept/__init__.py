"""``sparkllm accept``: the documents' acceptance checklist, run as one command.

"Not just HTTP 200": the checklist reads what the engine answered. Modules:

- ``rows``: one row of the report (pass / fail / not measured, basis, why).
- ``sse``: a strict reader of one streamed answer.
- ``functional``: acceptance point 3 (deterministic answer, streaming, reasoning, a
  function call, unsupported tool forms refused by the front door).
"""
