"""The minute, hour and day windows of RocketMQ's ``StatsItem`` for the two stats ``mqadmin statsAll``
and the dashboard ask for with VIEW_BROKER_STATS_DATA (315): ``TOPIC_PUT_NUMS`` (key: topic) and
``GROUP_GET_NUMS`` (key: ``topic@group``).

Sampled from the broker's traffic counters (no work per message): every 10 s into the minute
window (7 samples kept), every 10 min into the hour window (7) and every hour into the day window
(25), as upstream samples. A window's ``sum`` is its last sample minus its first, ``tps`` that sum
per second between them, ``avgpt`` the messages per put (``GROUP_GET_NUMS``: 0, pulls are not
counted one by one here). Memory: 39 samples per topic and per topic@group that had traffic.

Beside them, the broker's totals (messages put, messages pulled, pulls that found messages, pulls
that found none) are sampled once a second, 601 samples kept, as ``StoreStatsService`` samples them
for ``brokerStatus``'s ``putTps``, ``getTransferredTps``, ``getFoundTps``, ``getMissTps`` and
``getTotalTps`` (each the rate over the last 10, 60 and 600 seconds, "" until that much is sampled).
"""
from __future__ import annotations

import time
from collections import deque

TOPIC_PUT_NUMS = "TOPIC_PUT_NUMS"
GROUP_GET_NUMS = "GROUP_GET_NUMS"
#: (window, seconds between samples, samples kept), as ``StatsItem.init`` schedules them
WINDOWS = (("statsMinute", 10, 7), ("statsHour", 600, 7), ("statsDay", 3600, 25))
#: the spans ``StoreStatsService`` reports each runtime rate over, in seconds (one sample a second)
TPS_SPANS = (10, 60, 600)
#: the broker totals sampled: (name, index in a sample)
TOTALS = ("puts", "gets", "found", "miss")


def snapshot(samples) -> dict:
    """``StatsItem.computeStatsData`` over (ms, value, times) samples (one sample or none: 0 tps,
    where Java's division by a zero interval would give NaN)."""
    if not samples:
        return {"avgpt": 0.0, "sum": 0, "tps": 0.0}
    (t0, v0, n0), (t1, v1, n1) = samples[0], samples[-1]
    total = v1 - v0
    tps = total * 1000.0 / (t1 - t0) if t1 > t0 else 0.0
    return {"avgpt": total / (n1 - n0) if n1 > n0 else 0.0, "sum": total, "tps": tps}


class StatsWindows:
    def __init__(self, traffic, totals=None) -> None:
        self.traffic = traffic
        #: () -> (puts, messages pulled, pulls with messages, pulls without), or None
        self.totals = totals
        #: (monotonic seconds, *totals) once a second, the last TPS_SPANS[-1] + 1 of them
        self.per_second: deque = deque(maxlen=TPS_SPANS[-1] + 1)
        #: (stats name, key) -> one deque of (ms, value, times) per window
        self.items: dict[tuple[str, str], tuple[deque, deque, deque]] = {}
        self._next = [0.0] * len(WINDOWS)

    def _current(self) -> dict[tuple[str, str], tuple[int, int]]:
        cur: dict[tuple[str, str], list[int]] = {}
        for (topic, _kind), row in list(self.traffic.inbound.items()):
            acc = cur.setdefault((TOPIC_PUT_NUMS, topic), [0, 0])
            acc[0] += row[0]
            acc[1] += row[-1]
        for (topic, group), row in list(self.traffic.outbound.items()):
            cur[(GROUP_GET_NUMS, f"{topic}@{group}")] = [row[0], 0]
        return {k: (v[0], v[1]) for k, v in cur.items()}

    def sample(self, now_s: float | None = None, mono_s: float | None = None) -> None:
        """Take the samples that are due (call it at least every few seconds; the per-second totals
        want it once a second). ``now_s`` is the wall clock of the windows, ``mono_s`` the monotonic
        clock of the per-second totals (a wall clock set back would stall them)."""
        now_s = time.time() if now_s is None else now_s
        mono_s = time.monotonic() if mono_s is None else mono_s
        if self.totals is not None and (not self.per_second or mono_s - self.per_second[-1][0] >= 0.5):
            self.per_second.append((mono_s, *self.totals()))
        due = [i for i, (_, every, _) in enumerate(WINDOWS) if now_s >= self._next[i]]
        if not due:
            return
        ms = int(now_s * 1000)
        for key, (value, times) in self._current().items():
            item = self.items.get(key)
            if item is None:
                item = self.items[key] = tuple(deque(maxlen=keep) for _, _, keep in WINDOWS)
            for i in due:
                item[i].append((ms, value, times))
        for i in due:
            self._next[i] = now_s + WINDOWS[i][1]

    def broker_stats_data(self, name: str, key: str) -> dict | None:
        """``BrokerStatsData`` for one stats item, or None if it does not exist (yet)."""
        item = self.items.get((name, key))
        if item is None:
            return None
        return {w: snapshot(samples) for (w, _, _), samples in zip(WINDOWS, item)}

    def rate(self, total: str, span: int) -> float | None:
        """``CallSnapshot.getTPS`` of one of :data:`TOTALS` over the last ``span`` samples (seconds),
        or None while no more than ``span`` samples are kept."""
        ring = self.per_second
        if len(ring) <= span:
            return None
        (t0, *v0), (t1, *v1) = ring[-(span + 1)], ring[-1]
        i = TOTALS.index(total)
        return (v1[i] - v0[i]) / (t1 - t0) if t1 > t0 else 0.0

    def rates(self, total: str) -> str:
        """What ``brokerStatus`` shows for a total: its rates over 10, 60 and 600 seconds, each ""
        until sampled that long (``getTotalTps``, ``total="found+miss"``: 0.0 then, as upstream)."""
        out = []
        for span in TPS_SPANS:
            if total == "found+miss":
                v = sum(self.rate(t, span) or 0.0 for t in ("found", "miss"))
            else:
                v = self.rate(total, span)
            out.append("" if v is None else repr(float(v)))
        return " ".join(out)
