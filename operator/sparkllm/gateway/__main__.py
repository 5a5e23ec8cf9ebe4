"""``python -m sparkllm.gateway``: run the admission gateway (see ``main``)."""

from sparkllm.gateway import main

raise SystemExit(main())
