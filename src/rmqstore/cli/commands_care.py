"""Care commands: ``stats``, ``verify [--fix]``, ``recover``, ``clean``, ``rebuild``."""
from __future__ import annotations

import dataclasses
import inspect
import os

import click
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .common import TIME, StoreCommand, store_options
from .errors import ProblemsFoundError
from .render import NARROW, TIME_MIN_WIDTH, fmt_bytes, fmt_ts, kv_table, to_jsonable, tz_note
from .read_common import require_topic


# ---------------------------------------------------------------------------------------------
# stats
# ---------------------------------------------------------------------------------------------
def queue_bytes(store, topic: str, queue_id: int, lo: int, hi: int) -> int:
    """Sum of the message sizes of units [lo, hi) of one consume queue (no commitlog reads)."""
    cq = store.find_consume_queue(topic, queue_id)
    total, off = 0, lo
    while off < hi:
        units = cq.iterate_from(off)
        if units is None or len(units) == 0:
            nxt = cq.roll_next_file(off)
            if nxt <= off:
                break
            off = nxt
            continue
        n = min(len(units), hi - off)
        total += int(units["size"][:n].sum())
        off += n
    return total


@click.command()
@click.option("--topic", default=None, help="Only this topic.")
@store_options
def stats(cmd: StoreCommand, topic: str | None) -> None:
    """Per topic and queue: messages, bytes, first and last store time (from the consume queues,
    fast); read-only. For the full-scan Spark version see `rmqstore spark stats`."""
    with cmd.open_read() as st:
        topics = st.topics()
        if topic is not None:
            require_topic(st, topic)
            topics = {topic: topics[topic]}
        scope = [(t, q) for t in sorted(topics) for q in topics[t]]
        queues = []
        with cmd.out.progress("reading consume queues", len(scope)) as bar:
            for t, q in scope:
                lo, hi = st.get_min_offset_in_queue(t, q), st.get_max_offset_in_queue(t, q)
                queues.append({
                    "topic": t, "queue_id": q, "min_offset": lo, "max_offset": hi, "messages": hi - lo,
                    "bytes": queue_bytes(st, t, q, lo, hi),
                    "first_store_timestamp": st.get_message_store_timestamp(t, q, lo) if hi > lo else -1,
                    "last_store_timestamp": st.get_message_store_timestamp(t, q, hi - 1) if hi > lo else -1,
                })
                bar.advance(1)
        commitlog = {"min_offset": st.min_phy_offset, "max_offset": st.max_phy_offset,
                     "bytes": st.max_phy_offset - st.min_phy_offset}
        path = st.path
    topic_rows = _topic_rows(queues)
    totals = {"topics": len(topic_rows), "queues": len(queues), "messages": sum(r["messages"] for r in queues),
              "bytes": sum(r["bytes"] for r in queues)}
    doc = {"store": path, "commitlog": commitlog, "totals": totals, "topics": topic_rows, "queues": queues}
    if cmd.json:
        cmd.out.emit(doc)
        return
    _print_stats(cmd, doc)


def _topic_rows(queues: list[dict]) -> list[dict]:
    """The per-queue rows of stats summed per topic."""
    per_topic: dict[str, dict] = {}
    for r in queues:
        a = per_topic.setdefault(r["topic"], {"topic": r["topic"], "queues": 0, "messages": 0, "bytes": 0,
                                              "first_store_timestamp": -1, "last_store_timestamp": -1})
        a["queues"] += 1
        a["messages"] += r["messages"]
        a["bytes"] += r["bytes"]
        if r["first_store_timestamp"] >= 0:
            f = a["first_store_timestamp"]
            a["first_store_timestamp"] = r["first_store_timestamp"] if f < 0 else min(f, r["first_store_timestamp"])
        a["last_store_timestamp"] = max(a["last_store_timestamp"], r["last_store_timestamp"])
    return list(per_topic.values())


def _print_stats(cmd: StoreCommand, doc: dict) -> None:
    """stats as tables: the store's totals, then per topic and per queue."""
    commitlog, totals = doc["commitlog"], doc["totals"]
    cmd.out.print(kv_table(f"store {doc['store']}", [
        ("commitlog offsets", f"[{commitlog['min_offset']}, {commitlog['max_offset']})"),
        ("commitlog data", fmt_bytes(commitlog["bytes"])),
        ("topics / queues", f"{totals['topics']} / {totals['queues']}"),
        ("messages", f"{totals['messages']:,}"),
        ("message bytes", fmt_bytes(totals["bytes"])),
    ]))
    narrow = cmd.out.console.width < NARROW  # then only the last store time, no offsets column
    for title, rows, per_queue in (("topics", doc["topics"], False), ("queues", doc["queues"], True)):
        tb = Table(title=title, caption=tz_note() if per_queue else None)
        tb.add_column("topic")
        tb.add_column("queue" if per_queue else "queues", justify="right")
        if per_queue and not narrow:
            tb.add_column("offsets", justify="right")
        for c in ("messages", "bytes"):
            tb.add_column(c, justify="right")
        if not narrow:
            tb.add_column("first store time", min_width=TIME_MIN_WIDTH)
        tb.add_column("last store time", min_width=TIME_MIN_WIDTH)
        for r in rows:
            cells = [escape(r["topic"]), str(r["queue_id"] if per_queue else r["queues"])]
            if per_queue and not narrow:
                cells.append(f"[{r['min_offset']}, {r['max_offset']})")
            cells += [f"{r['messages']:,}", fmt_bytes(r["bytes"])]
            if not narrow:
                cells.append(fmt_ts(r["first_store_timestamp"]))
            cells.append(fmt_ts(r["last_store_timestamp"]))
            tb.add_row(*cells)
        cmd.out.print(tb)


# ---------------------------------------------------------------------------------------------
# verify
# ---------------------------------------------------------------------------------------------
def finding_dict(f) -> dict:
    return {"kind": to_jsonable(getattr(f, "kind", None)), "path": getattr(f, "path", None),
            "offset": getattr(f, "offset", None), "detail": getattr(f, "detail", None),
            "fixed": bool(getattr(f, "fixed", False))}


def _call_with_progress(fn, out, label: str, total: int | None, **kwargs):
    """Call ``fn(**kwargs)``, passing a progress callback when ``fn`` accepts one."""
    if "progress" in inspect.signature(fn).parameters:
        with out.progress(label, total, unit="bytes") as bar:
            return fn(**kwargs, progress=bar.update)
    with out.status(label + " ..."):
        return fn(**kwargs)


#: what to do about each kind of finding (the one line ``verify`` ends with)
VERIFY_ADVICE = {
    "record_crc": "damaged records are never served; they can only come back from a copy of the store",
    "record_invalid": "bytes that are no record are never served; the records around them are intact",
    "cq_unit": "`rmqstore verify --fix` rebuilds the consume queue from the commitlog",
    "cq_gap": "`rmqstore verify --fix` rebuilds the consume queue from the commitlog",
    "index_item": "`rmqstore verify --fix` rebuilds the index from the commitlog",
    "checkpoint_ahead": "`rmqstore verify --fix` rewrites the checkpoint",
    "tail_garbage": "`rmqstore verify --fix` cuts the tail (the bytes are kept under recovery/)",
}


@click.command()
@click.option("--fix", is_flag=True, help="Repair what can be repaired (WRITES: opens the store for writing, "
                                          "takes the lock).")
@click.option("--limit", type=click.IntRange(0), default=50, show_default=True,
              help="Findings listed in the table (the summary and --json count and hold all of them).")
@store_options
def verify(cmd: StoreCommand, fix: bool, limit: int) -> None:
    """Check every record's CRC and the consume queues and index against the commitlog; read-only
    unless --fix (which WRITES). Exit 12 when problems remain unfixed."""
    from ..engine.verify import work_bytes

    with (cmd.open_write() if fix else cmd.open_read(stand_in_derived=False)) as st:
        findings = _call_with_progress(st.verify, cmd.out, "verifying", work_bytes(st), fix=fix)
        path = st.path
    rows = [finding_dict(f) for f in findings]
    unfixed = sum(not r["fixed"] for r in rows)
    summary: dict[str, dict[str, int]] = {}
    for r in rows:
        k = summary.setdefault(r["kind"], {"found": 0, "fixed": 0})
        k["found"] += 1
        k["fixed"] += bool(r["fixed"])
    advice = sorted({VERIFY_ADVICE.get(k, "see the findings") for k, c in summary.items() if c["found"] > c["fixed"]})
    d = {"store": path, "fix": fix, "ok": unfixed == 0, "summary": summary, "findings": rows,
         "fixed": len(rows) - unfixed, "unfixed": unfixed, "advice": advice}
    if cmd.json:
        cmd.out.emit(d)
    else:
        _verify_tables(cmd, path, rows, summary, limit)
        for line in advice:
            cmd.out.print(Text(f"what to do: {line}"))
    if unfixed:
        raise ProblemsFoundError(f"{unfixed} problem(s) not fixed in {path}",
                                 hint="run `rmqstore verify --fix` (it writes)" if not fix else
                                 "see the findings; restore the damaged files from a copy if needed")


def _verify_tables(cmd: StoreCommand, path: str, rows: list[dict], summary: dict, limit: int) -> None:
    if not rows:
        cmd.out.print(Text(f"verify {path}: no problems found", style="green"))
        return
    shown = rows[:limit]
    tb = Table(title=f"verify {path}: {len(rows)} findings, {sum(r['fixed'] for r in rows)} fixed"
                     + (f" (the first {len(shown)} listed; --limit, or --json for all)" if len(shown) < len(rows) else ""))
    for c in ("kind", "path", "offset", "detail", "fixed"):
        tb.add_column(c, overflow="fold")
    for r in shown:
        tb.add_row(escape(str(r["kind"])), escape(str(r["path"] or "-")),
                   "-" if r["offset"] is None else str(r["offset"]), Text(str(r["detail"] or "")),
                   "yes" if r["fixed"] else "no")
    cmd.out.print(tb)
    st = Table(title="findings by kind")
    for c in ("kind", "found", "fixed"):
        st.add_column(c, justify="left" if c == "kind" else "right")
    for kind, c in sorted(summary.items()):
        st.add_row(kind, str(c["found"]), str(c["fixed"]))
    cmd.out.print(st)


# ---------------------------------------------------------------------------------------------
# recover
# ---------------------------------------------------------------------------------------------
def recovery_dict(path: str, rep) -> dict:
    """The stable JSON form of a RecoveryReport (documented in the CLI reference)."""
    span = lambda c: {"segment": c.segment, "offset": c.offset, "length": c.length, "reason": c.reason}  # noqa: E731
    return {
        "store": path, "mode": rep.mode, "applied": rep.applied, "clean": rep.clean,
        "start_offset": rep.start_offset, "end_offset": rep.end_offset, "last_valid_offset": rep.last_valid_offset,
        "records_scanned": rep.records_scanned,
        "cuts": [{**span(c), "saved_to": c.saved_to} for c in rep.cuts],
        "corrupt_records": [span(c) for c in getattr(rep, "corrupt_records", [])],
        "consume_queues_truncated": list(rep.consume_queues_truncated),
        "index_files_rebuilt": list(rep.index_files_rebuilt),
        "redispatch_from": rep.redispatch_from, "records_redispatched": getattr(rep, "records_redispatched", None),
        "seconds": round(rep.seconds, 6), "summary": rep.summary(),
    }


@click.command()
@click.option("--dry-run", is_flag=True, help="Only say what recovery would do (read-only open).")
@store_options
def recover(cmd: StoreCommand, dry_run: bool) -> None:
    """Run startup recovery and report it (WRITES unless --dry-run: cuts a torn tail, saving the cut
    bytes under recovery/, truncates consume queues, re-dispatches, rebuilds dropped index files)."""
    with cmd.out.status("recovering"):
        with (cmd.open_read() if dry_run else cmd.open_write()) as st:
            rep = st.recovery_report
            path = st.path
    d = recovery_dict(path, rep)
    if cmd.json:
        cmd.out.emit(d)
        return
    cmd.out.print(kv_table(f"recovery of {path}", [
        ("mode", rep.mode), ("applied", rep.applied), ("summary", rep.summary()),
        ("valid data", f"[{rep.start_offset}, {rep.end_offset})"), ("last valid record at", rep.last_valid_offset),
        ("records scanned", rep.records_scanned),
        ("re-dispatched", f"{d['records_redispatched']} records from {rep.redispatch_from}"),
        ("consume queues truncated", ", ".join(rep.consume_queues_truncated) or "-"),
        ("index files rebuilt", ", ".join(rep.index_files_rebuilt) or "-"), ("seconds", f"{rep.seconds:.3f}"),
    ]))
    if rep.cuts:
        tb = Table(title="cut tails")
        for c in ("segment", "offset", "length", "reason", "saved to"):
            tb.add_column(c, overflow="fold")
        for c in rep.cuts:
            tb.add_row(c.segment, str(c.offset), str(c.length), Text(c.reason), Text(c.saved_to or "-"))
        cmd.out.print(tb)
    if d["corrupt_records"]:
        tb = Table(title="corrupt records kept in place (never served)")
        for c in ("segment", "offset", "length", "reason"):
            tb.add_column(c, overflow="fold")
        for c in d["corrupt_records"]:
            tb.add_row(Text(str(c["segment"])), str(c["offset"]), str(c["length"]), Text(str(c["reason"])))
        cmd.out.print(tb)


# ---------------------------------------------------------------------------------------------
# clean
# ---------------------------------------------------------------------------------------------
@click.command()
@click.option("--dry-run", is_flag=True, help="Only list what would be deleted (read-only open).")
@click.option("--force", is_flag=True, help="Delete expired files now, whatever the hour (deleteWhen) and disk use.")
@click.option("--now", "now_ms", type=TIME, default=None, help="Pretend it is this time (epoch ms or ISO time).")
@store_options
def clean(cmd: StoreCommand, dry_run: bool, force: bool, now_ms: int | None) -> None:
    """Delete expired commitlog, consume-queue and index files, by fileReservedTime (WRITES: deletes
    files; takes the lock) -- or list them with --dry-run."""
    with (cmd.open_read() if dry_run else cmd.open_write()) as st:
        with cmd.out.status("cleaning" if not dry_run else "checking retention"):
            res = st.clean_expired(now_ms=now_ms, dry_run=dry_run, force=force)
        path = st.path
    d = {"store": path, **to_jsonable(res)}
    if cmd.json:
        cmd.out.emit(d)
        return
    files = [(kind, f) for kind, key in (("commitlog", "commitlog_files"), ("consume queue", "consume_queue_files"),
                                         ("index", "index_files")) for f in d.get(key) or []]
    lists = ("commitlog_files", "consume_queue_files", "index_files", "retained_files", "unconsumed_deleted")
    rows = [(k.replace("_", " "), v) for k, v in d.items() if k not in lists]
    rows += [(k.replace("_", " "), ", ".join(map(str, d[k]))) for k in ("retained_files", "unconsumed_deleted") if d.get(k)]
    what = "files to delete (dry run: nothing deleted)" if dry_run else "files deleted"
    cmd.out.print(kv_table(f"clean {path}: {len(files)} {what}", rows))
    if files:
        tb = Table(title=what)
        tb.add_column("kind")
        tb.add_column("file", overflow="fold")
        for kind, f in files:
            tb.add_row(kind, Text(str(f)))
        cmd.out.print(tb)


# ---------------------------------------------------------------------------------------------
# rebuild
# ---------------------------------------------------------------------------------------------
@click.command()
@click.argument("out_dir", type=click.Path(file_okay=False))
@store_options
def rebuild(cmd: StoreCommand, out_dir: str) -> None:
    """Rebuild consume queues and index files from the commitlog into OUT_DIR, in-process (WRITES
    only OUT_DIR, which must be new or empty; the store itself is opened read-only and never changed)."""
    from ..rebuild import check_new_output, rebuild as run_rebuild

    check_new_output(out_dir, cmd.store_path)  # before the store is even opened
    with cmd.open_read() as st:
        lo, hi = st.min_phy_offset, st.max_phy_offset
    with cmd.out.progress("rebuilding", max(hi - lo, 1), unit="bytes") as bar:
        res = run_rebuild(cmd.store_path, out_dir, cmd.config(), progress=lambda done: bar.update(done - lo))
    d = {"store": os.path.abspath(cmd.store_path), **to_jsonable(dataclasses.asdict(res))}
    if cmd.json:
        cmd.out.emit(d)
    else:
        cmd.out.print(kv_table(f"rebuilt consume queues and index of {d['store']}", list(d.items())))


COMMANDS = [stats, verify, recover, clean, rebuild]
