"""Per-user governance in the front door: policy, fair queuing, exact budgets, accounting.

Why a package of its own: the admission decision (admission.py) is pure and per request;
governance is stateful and per user — who may send how much, in which order waiting
requests get the engine's few slots, what each request reserved and really used. The
state sits behind one protocol (store.py) so it can live in this process or in a shared
store (Redis) for several gateway replicas.
"""
