"""The front door's rules: each refusal (or rewrite) a request can meet, one small unit each.

Why rules: a refusal used to come from wherever the code happened to be — the app, the
admission decision, the allowlist, the governor, the limiter — so the order of checks
could only be learned by reading them all, and a new refusal had no obvious room. Here
each check is one callable that takes the request's context and answers one of three
ways:

* ``None`` — continue (it may have *transformed* the context: read the body, named the
  user, rewritten the model alias, clamped ``max_tokens``);
* an ``ErrorReply`` — refuse with that status, ``error.code``, message and headers;
* ``Stop.CLIENT_LEFT`` — stop without an answer: nobody is left to send one to.

The order is one list, :mod:`sparkllm.gateway.rules.pipeline`; that module is the place
to read (and extend) what the front door checks. Two kinds of rule, both in that list:

* request rules (``async``), run by the app for every generation request: they await
  the body, the governance store, the fair queue;
* payload rules (plain functions), the admission decision's: pure functions of the
  body and the deployment's numbers, run in ``Admission.decide`` — on a worker thread
  for a large body, and again with an exact count when a token budget asks for one.

A payload rule may also refuse by raising ``RequestRejectedError`` (what the shape
checks in validation.py do from deep inside a field); the walk turns it into the reply.
"""
