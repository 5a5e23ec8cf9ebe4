"""The Kubernetes API, for every part of the product that talks to it.

The bottom floor: it imports nothing of sparkllm but its errors, so the operator
(``reconcile``), the gateway (its policy ConfigMap) and the acceptance run (``bench``) share
one client without reaching into each other. ``kinds`` is pure data (a kind's REST path);
``client`` is the one HTTP client (server-side apply with one field manager). This face
imports neither, so importing ``sparkllm.kube.kinds`` loads no HTTP client.
"""
