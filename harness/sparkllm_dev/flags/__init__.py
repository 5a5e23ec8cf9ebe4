"""Extraction of the pinned SGLang's flag table from its source text (dev-only).

The product reads the checked-in table (``sparkllm.sglang_contract.flags``); this package
regenerates it (``hack/update-sglang-flags.sh``) and tests that it is still what SGLang
registers.
"""
