"""``rmqstore reset-offset``: move a consumer group's committed offsets in a STOPPED broker's store,
by store time or to an explicit offset -- what ``mqadmin resetOffsetByTime`` asks of a running
broker, done on the files.

The new offsets are the broker's own answer (:func:`rmqstore.broker.admin_ops.reset_target_offsets`,
which the running broker's INVOKE_BROKER_TO_RESET_OFFSET uses too), computed on the store opened
read-only; then, holding the store's writer lock so that no broker starts meanwhile, the offsets file
is loaded, changed and written as RocketMQ's broker writes it (a new file beside, renamed into place,
the previous one kept as ``consumerOffset.json.bak``)."""
from __future__ import annotations

import os
import re

import click
from rich.table import Table

from .common import StoreCommand, TimeParam, parse_time_ms, store_options
from .errors import UsageProblem
from .render import fmt_ts, tz_note

#: mqadmin's own time form for ``-s`` (``UtilAll.YYYY_MM_DD_HH_MM_SS_SSS``), local time
_MQADMIN_TIME = re.compile(r"(\d{4})-(\d{2})-(\d{2})#(\d{2}):(\d{2}):(\d{2}):(\d{3})")


def parse_reset_time(text: str) -> int:
    """Epoch ms from what ``mqadmin resetOffsetByTime -s`` takes (``now``, epoch ms,
    ``yyyy-MM-dd#HH:mm:ss:SSS`` in local time) or an ISO time (local unless it has an offset)."""
    m = _MQADMIN_TIME.fullmatch(text.strip())
    if m:
        y, mo, d, h, mi, s, ms = m.groups()
        text = f"{y}-{mo}-{d}T{h}:{mi}:{s}.{ms}"
    return parse_time_ms(text)


class ResetTimeParam(TimeParam):
    """A time as :func:`parse_reset_time` takes it."""

    parse = staticmethod(parse_reset_time)
    hint = " (mqadmin's yyyy-MM-dd#HH:mm:ss:SSS and `now` work too)"


def read_queue_count(store_path: str, store_queues: list[int], committed: dict[int, int], topic: str) -> int:
    """How many queues a reset covers: the topic's ``readQueueNums`` in the broker's
    ``config/topics.json`` (what the broker resets), else what the broker would give the topic on
    adopting it (the highest stored queue id + 1), else the highest committed queue id + 1."""
    from ..broker.metadata import JsonStateFile
    from ..io import paths

    doc = JsonStateFile(os.path.join(store_path, paths.TOPICS_FILE), read_only=True).load() or {}
    tc = (doc.get("topicConfigTable") or {}).get(topic)
    if isinstance(tc, dict) and isinstance(tc.get("readQueueNums"), int):
        return tc["readQueueNums"]
    ids = store_queues or list(committed)
    return max(ids) + 1 if ids else 0


def _require_entry(table: dict, group: str, topic: str, path: str) -> dict[int, int]:
    """The group's committed offsets in ``topic``; a usage error naming what the file holds."""
    if (topic, group) in table:
        return table[(topic, group)]
    keys = sorted(f"{t}@{g}" for t, g in table)
    listed = ", ".join(keys[:20]) + (f", ... ({len(keys)} entries)" if len(keys) > 20 else "")
    what = (f"consumer group {group!r} has no committed offsets in topic {topic!r}"
            if any(g == group for _, g in table) or any(t == topic for t, _ in table)
            else f"neither consumer group {group!r} nor topic {topic!r} has committed offsets")
    raise UsageProblem(f"{what} in {path} (topic@group entries: {listed or 'none'})",
                       hint="`rmqstore consumer-progress` lists every group's committed offsets; a group "
                            "gets an entry when its consumers commit")


def compute_reset(cmd: StoreCommand, group: str, topic: str, timestamp: int | None, offset: int | None,
                  queue_id: int | None) -> dict:
    """Old and new offsets per queue (nothing written): the broker's computation on the store
    opened read-only."""
    from ..broker.admin_ops import reset_target_offsets
    from ..errors import OffsetError

    with cmd.open_read() as st:
        committed = _require_entry(st.consumer_offsets.table(), group, topic, st.path)
        queues = read_queue_count(st.path, st.topics().get(topic, []), committed, topic)
        if queue_id is not None and queue_id >= queues:
            raise UsageProblem(f"topic {topic!r} has {queues} read queues in {st.path}: no queue {queue_id}",
                               hint=f"give --queue 0..{queues - 1}, or leave it out to reset every queue")
        try:
            if offset is not None and queue_id is None:  # every queue to one offset, each checked as one is
                new = {q: reset_target_offsets(st, topic, queues, -1, q, offset)[q] for q in range(queues)}
            else:
                new = reset_target_offsets(st, topic, queues, -1 if timestamp is None else timestamp,
                                           -1 if queue_id is None else queue_id, offset)
        except OffsetError as e:
            raise UsageProblem(f"{e.args[0]} (topic {topic!r}, path={st.path})",
                               hint="`rmqstore topic-status` shows each queue's range") from None
        rows = [{"queue_id": q, "old_offset": committed.get(q), "new_offset": o,
                 "min_offset": st.get_min_offset_in_queue(topic, q), "max_offset": st.get_max_offset_in_queue(topic, q)}
                for q, o in sorted(new.items())]
    return {"store": st.path, "group": group, "topic": topic, "timestamp": timestamp, "offset": offset, "queues": rows}


def write_reset(store_path: str, group: str, topic: str, rows: list[dict]) -> bool:
    """Commit the new offsets to the store's offsets file under its writer lock; True when the file
    changed (:class:`~rmqstore.errors.StoreLockedError` when a broker holds the lock)."""
    from ..engine.consumer_offsets import CONSUMER_OFFSET_FILE, ConsumerOffsetManager
    from ..engine.lifecycle import writer_lock

    with writer_lock(store_path):
        offsets = ConsumerOffsetManager(os.path.join(store_path, CONSUMER_OFFSET_FILE))
        offsets.load()
        for r in rows:
            offsets.commit_offset(group, topic, r["queue_id"], r["new_offset"])
        return offsets.persist()


@click.command("reset-offset")
@click.argument("group")
@click.argument("topic")
@click.option("--timestamp", "-s", "timestamp", type=ResetTimeParam(), default=None,
              help="Move to the first message stored at or after this time: epoch ms, `now`, an ISO time "
                   "(2026-11-27T10:00:00, local unless it has an offset) or mqadmin's yyyy-MM-dd#HH:mm:ss:SSS.")
@click.option("--offset", "-o", "offset", type=click.IntRange(0), default=None,
              help="Move to this queue offset (with --queue: that queue; without: every queue).")
@click.option("--queue", "-q", "queue_id", type=click.IntRange(0), default=None,
              help="Only this queue (default: every read queue of the topic).")
@click.option("--dry-run", is_flag=True, help="Print the old and new offsets; write nothing.")
@store_options
def reset_offset(cmd: StoreCommand, group: str, topic: str, timestamp: int | None, offset: int | None,
                 queue_id: int | None, dry_run: bool) -> None:
    """Reset GROUP's committed offsets in TOPIC, in a stopped broker's store (WRITES config/consumerOffset.json;
    not with --dry-run).

    By time (--timestamp): each queue moves to the first message stored at or after it, the offset
    the broker's resetOffsetByTime computes (getOffsetInQueueByTime; past the last message: the
    queue's end). By offset (--offset): the queue(s) move there; with --queue the offset must lie in
    the queue's [min, max] as the broker requires. The group must have committed offsets in the
    topic (exit 2 otherwise, naming the entries the file holds). Refused with exit 4 while a broker
    or writer holds the store (reset a running broker's group with mqadmin resetOffsetByTime). The
    file is written as RocketMQ's broker writes it: a new file renamed into place, the old one kept
    as consumerOffset.json.bak.
    """
    if (timestamp is None) == (offset is None):
        raise UsageProblem("give exactly one of --timestamp and --offset",
                           hint="--timestamp now moves to the queues' ends; --offset 0 to their starts")
    cmd.refuse_if_locked()
    plan = compute_reset(cmd, group, topic, timestamp, offset, queue_id)
    plan["dry_run"] = dry_run
    plan["written"] = False if dry_run else write_reset(cmd.store_path, group, topic, plan["queues"])
    _print(cmd, plan)


def _print(cmd: StoreCommand, plan: dict) -> None:
    if cmd.json:
        cmd.out.emit(plan)
        return
    how = (f"to the first message stored at or after {fmt_ts(plan['timestamp'])}" if plan["timestamp"] is not None
           else f"to offset {plan['offset']}")
    verb = "would move" if plan["dry_run"] else "moved"
    tb = Table(title=f"{plan['group']} in {plan['topic']}: {verb} {how}", caption=tz_note())
    for c in ("queue", "old offset", "new offset", "min offset", "max offset"):
        tb.add_column(c, justify="right")
    for r in plan["queues"]:
        tb.add_row(str(r["queue_id"]), "-" if r["old_offset"] is None else str(r["old_offset"]), str(r["new_offset"]),
                   str(r["min_offset"]), str(r["max_offset"]))
    cmd.out.print(tb)
    if plan["dry_run"]:
        cmd.out.print("dry run: nothing written")
    elif not plan["written"]:
        cmd.out.print("the offsets were already these: the file is unchanged")
    else:
        from ..engine.consumer_offsets import CONSUMER_OFFSET_FILE

        cmd.out.print(f"written: {os.path.join(plan['store'], CONSUMER_OFFSET_FILE)} (the previous file kept "
                      f"beside it with .bak)")


COMMANDS = [reset_offset]
