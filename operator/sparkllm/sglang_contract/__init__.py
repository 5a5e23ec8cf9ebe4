"""The contract with the pinned SGLang (0.5.23): its flags, the command line, the field table.

Why one package: the operator meets SGLang in three places — the API refuses
``extraArgs`` that would override a flag the operator sets and offers SGLang's parser
names as enums; the renderer writes each rank's command line; the ConfigApplied check
reads back what rank 0 runs with (``/get_server_info``) and names the spec field that
was not applied. All three must agree on the same flag names, the same ``server_info``
keys and the same typing of values, for the SGLang version inside the image. When they
were written in separate places they drifted on an SGLang upgrade
(``--cuda-graph-max-bs`` -> ``--cuda-graph-max-bs-decode``). Here:

- ``flags``: the pinned SGLang's flag table (``sglang_flags.json``, extracted from the
  wheel by ``hack/update-sglang-flags.sh``) and an argparse-faithful parser of its argv.
- ``argv``: ``--flag value`` / ``--flag=value`` words, written and read in one place.
- ``fields``: THE table — each launch setting's source (a spec path), its flag, and its
  server_info key (the flag's ``dest``); the flags the operator owns; parser choices.
- ``command``: one rank's argv, built from the table.

``sparkllm.configcheck`` (ConfigApplied) compares server_info with the spec field by
field through ``fields``. Pure throughout: no I/O beyond reading the packaged table once.
This ``__init__`` imports nothing, and no module here imports the API at run time:
:mod:`sparkllm.api` builds on ``fields`` (owned flags, parser enums), not the reverse.
"""
