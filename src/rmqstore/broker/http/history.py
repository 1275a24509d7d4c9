"""A short history for the console's charts: every ``interval`` seconds the messages in and out so
far and each group's lag, the last hour kept (a bounded ring: 360 samples at 10 s)."""
from __future__ import annotations

import asyncio
import collections
import logging
import time

from .views import group_lag_rows

log = logging.getLogger("rmqstore.broker.http")


class History:
    def __init__(self, broker, interval: float = 10.0, keep: int = 360) -> None:
        self.broker = broker
        self.interval = interval
        self.samples: collections.deque = collections.deque(maxlen=keep)

    def sample(self) -> dict:
        b = self.broker
        lag: dict[str, int] = {}
        for row in group_lag_rows(b):
            lag[row["group"]] = lag.get(row["group"], 0) + row["lag"]
        s = {"t": int(time.time() * 1000), "in": b.traffic.puts, "out": b.traffic.gets, "lag": lag}
        self.samples.append(s)
        return s

    async def run(self) -> None:
        while True:
            try:
                self.sample()
            except Exception:  # noqa: BLE001 - a sample is skipped, the next one is taken
                log.exception("history sample failed")
            await asyncio.sleep(self.interval)

    def answer(self, group: str | None = None) -> list[dict]:
        """The samples, oldest first; with ``group`` only that group's lag in each."""
        if group is None:
            return list(self.samples)
        return [{"t": s["t"], "in": s["in"], "out": s["out"], "lag": s["lag"].get(group, 0)} for s in self.samples]


__all__ = ["History"]
