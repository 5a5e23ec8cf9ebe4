"""The governor's slots in process (MemoryStore): a burst leaves nothing held.

The default store has no round trips to save, but it goes the same way through
slots.py: the global slot taken with the admission when a local one is free, kept as a
spare from ``release`` to ``finish`` and handed to the next local request. Under a burst
(40 requests on 3 slots, some clients leaving before they ask for their slot) the
global bound is reached and never passed, and afterwards no slot is held.
The same against a real Redis: test_governance_redis_roundtrips.py.
"""

from __future__ import annotations

import asyncio
import random

from sparkllm.gateway.governance.store import MemoryStore
from tests.unit.test_governance_redis_roundtrips import (
    admitted,
    finish,
    governor_for,
    never_disconnects,
)


def test_in_process_a_burst_leaves_no_slot_held_and_never_passes_the_bound() -> None:
    """MemoryStore: the same governor, 40 requests on 3 slots, some leaving early."""
    store = MemoryStore()
    governor = governor_for(store, slots=3)
    rng = random.Random(7)
    most = 0

    async def one(number: int) -> None:
        nonlocal most
        await asyncio.sleep(rng.random() * 0.02)
        granted = await admitted(governor)
        holder: str | None = None
        if number % 5:  # every fifth client leaves before asking for its slot
            slot = await governor.wait_for_slot(granted, never_disconnects)
            assert isinstance(slot, str)
            holder = slot
            most = max(most, len(store._slots))
            await asyncio.sleep(rng.random() * 0.005)
        await finish(governor, granted, holder=holder)

    async def burst() -> None:
        await asyncio.gather(*(one(n) for n in range(40)))

    asyncio.run(burst())
    assert most == 3  # the bound was reached, never passed
    assert store._slots == set()
    assert governor.limiter.in_flight == 0
