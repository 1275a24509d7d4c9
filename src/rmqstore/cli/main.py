"""``rmqstore``: the offline toolbox for RocketMQ stores (rmqstore's own and copies of a broker's).

Command reference and --json shapes: docs/cli.md; exit codes: docs/exit-codes.md (generated from errors.py).
"""
from __future__ import annotations

import os

import click
from rich.table import Table

from . import (commands_care, commands_namesrv, commands_offsets, commands_read, commands_serve, commands_spark,
               commands_write)
from .aliases import ALIASES, alias_command
from .common import RmqGroup, StoreCommand, debug_option, install_logging, json_option
from .errors import ProblemsFoundError, UsageProblem
from .render import fmt_bytes, fmt_ts, kv_table, to_jsonable


def _version() -> str:
    from .. import __version__

    return __version__


@click.group(cls=RmqGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(_version(), prog_name="rmqstore")
@debug_option
@click.pass_context
def cli(ctx: click.Context) -> None:
    """Offline toolbox for RocketMQ message stores (rmqstore's own and copies of a broker's).

    Reading commands open the store read-only and never change it; commands that write say so.
    Every command takes --store DIR and --config broker.conf; --json prints JSON for scripts.
    """
    install_logging(ctx)


@cli.command()
@click.option("--dir", "store_dir", default=os.path.join("data", "store"), show_default=True,
              metavar="DIR", help="The demo's own directory: created, or emptied when an earlier demo made it "
                                  "(marked by a .rmqstore-demo file); any other directory is refused.")
@click.option("--messages", type=click.IntRange(1), default=100_000, show_default=True, help="How many messages to write.")
@click.option("--config", "config", type=click.Path(dir_okay=False, exists=True), default=None, metavar="BROKER_CONF",
              help="broker.conf-style properties for the new store (segment sizes, ...).")
@click.option("--no-spark", is_flag=True, help="Skip the Spark stats step.")
@click.option("--master", default=None, metavar="URL", help="Spark master for the stats step (default local[*]).")
@json_option
@debug_option
def demo(store_dir: str, messages: int, config: str | None, no_spark: bool, master: str | None,
         json_mode: bool) -> None:
    """The main job (WRITES into its own DIR): produce a realistic workload, dispatch, consume every
    queue, query by key, unique key, msg id and time, then run the Spark stats job on the result and
    print a short report. DIR is the demo's own: created when missing, emptied on the next run only
    when the demo made it; a directory it did not make is refused (exit 2), and so is one whose
    store a live broker or writer has open (exit 4). Exit 12 if a check fails."""
    from ..demo import MARKER, run_demo
    from ..errors import OutputExistsError

    from ..config import MessageStoreConfig

    cmd = StoreCommand(store_dir, config, json_mode)
    # the directory is recreated: its old files say nothing about the new store's segment sizes
    cfg = MessageStoreConfig.from_properties(cmd.broker_properties()) if config else None
    try:
        with cmd.out.progress("producing (then pulling and querying)", messages) as bar:
            rep = run_demo(store_dir, messages, cfg=cfg, progress=bar.advance)
    except OutputExistsError as e:
        raise UsageProblem(str(e), hint=f"give --dir a new or empty directory; the demo only empties directories "
                                        f"it made (they hold {MARKER})") from None
    spark_stats = None
    if not no_spark:
        jobs, sp, scfg = commands_spark.open_session(cmd, master)
        with cmd.out.status("Spark stats"):
            spark_stats = jobs.stats(sp, store_dir, cfg=scfg, top=5)
    d = {"store_dir": rep.store_dir, "messages": rep.messages, "bytes_written": rep.bytes_written,
         "steps": [{"step": w, "count": n, "seconds": round(s, 6),
                    "per_second": round(n / s) if n is not None and s > 0 else None} for w, n, _, s in rep.steps],
         "checks": [{"check": w, "ok": ok} for w, ok in rep.checks], "ok": rep.ok,
         "spark_stats": to_jsonable(spark_stats)}
    if json_mode:
        cmd.out.emit(d)
    else:
        t = Table(title=f"rmqstore demo: {rep.messages:,} messages, {fmt_bytes(rep.bytes_written)} "
                        f"in {rep.store_dir}")
        t.add_column("step")
        t.add_column("how many", justify="right")
        t.add_column("seconds", justify="right")
        t.add_column("rate", justify="right")
        for what, n, unit, s in rep.steps:
            t.add_row(what, "-" if n is None else f"{n:,} {unit}", f"{s:.3f}",
                      f"{n / s:,.0f} {unit}/s" if n is not None and s > 0 else "-")
        cmd.out.print(t)
        for what, ok in rep.checks:
            cmd.out.print(("[green]ok  [/] " if ok else "[red]FAIL[/] ") + what)
        if spark_stats is not None:
            cmd.out.print(kv_table("Spark stats of the demo store (full scan; `rmqstore spark stats` for all of it)",
                                   spark_summary(to_jsonable(spark_stats))))
    if not rep.ok:
        failed = [w for w, ok in rep.checks if not ok]
        raise ProblemsFoundError(f"demo checks failed: {'; '.join(failed)}", hint="rerun with --debug; report it")


def spark_summary(st: dict) -> list[tuple[str, object]]:
    """The few lines of a Spark stats result the demo report shows."""
    rows: list[tuple[str, object]] = [("records", f"{st.get('records', 0):,}"), ("bytes", fmt_bytes(st.get("bytes"))),
                                      ("first store time", fmt_ts(st.get("first_store_timestamp"))),
                                      ("last store time", fmt_ts(st.get("last_store_timestamp")))]
    topics = st.get("topics") or []
    if topics:
        rows.append(("messages per topic", ", ".join(f"{t['topic']} {t['messages']:,}" for t in topics)))
    keys = st.get("top_keys") or []
    if keys:
        rows.append(("top keys", ", ".join(f"{k['topic']}/{k['key']} ({k['messages']})" for k in keys)))
    dup = st.get("duplicate_uniq_keys") or {}
    if dup:
        rows.append(("duplicate UNIQ_KEYs", f"{dup.get('keys', 0)} ({dup.get('extra_records', 0)} extra records)"))
    hc = st.get("hash_collisions") or {}
    if hc:
        rows.append(("index hash collisions", f"{hc.get('colliding_hashes', 0)} hashes shared by "
                                              f"{hc.get('colliding_keys', 0)} of {hc.get('distinct_keys', 0):,} keys"))
    if isinstance(st.get("seconds"), (int, float)):
        rows.append(("Spark seconds", f"{st['seconds']:.1f}"))
    return rows


for _mod in (commands_write, commands_read, commands_offsets, commands_care, commands_spark, commands_serve,
             commands_namesrv):
    for _c in _mod.COMMANDS:
        cli.add_command(_c)

#: one line each for `rmqstore --help` (the full text is each command's own --help)
SHORT_HELP = {
    "demo": "The main job: workload, reads, Spark stats (writes).",
    "send": "Append one message (writes).",
    "load": "Bulk-import a JSON Lines file, reproducibly (writes).",
    "export": "Messages to Parquet, JSON Lines or CSV, no Spark.",
    "pull": "Pull messages of a queue, like a consumer.",
    "query-key": "Messages of a topic by business key (KEYS).",
    "query-unique-key": "Messages of a topic by UNIQ_KEY (client message id).",
    "query-id": "One message by offsetMsgId (the broker's msg id).",
    "query-offset": "One message by commitlog offset.",
    "print": "Every field of one message, body as text or hex.",
    "browse": "Stream messages in a time window, with filters.",
    "topic-status": "Min/max offset and last store time per queue.",
    "consumer-progress": "Committed offset and lag per consumer group and queue.",
    "offset-by-time": "Queue offset at a store time, per queue.",
    "reset-offset": "Reset a group's offsets by time or offset (writes).",
    "stats": "Messages, bytes, store times per topic and queue.",
    "verify": "Check CRCs, consume queues and index (--fix writes).",
    "recover": "Run recovery and report it (writes; not with --dry-run).",
    "clean": "Delete expired files (writes; not with --dry-run).",
    "rebuild": "Rebuild consume queues and index into a new directory.",
    "spark": "Spark jobs: rebuild, verify, export, stats.",
    "serve": "A RocketMQ broker + name server on the store (writes).",
    "namesrv": "A RocketMQ name server for broker groups (no store).",
}
#: mqadmin's command names (queryMsgByKey, resetOffsetByTime, ...): run, not listed
cli.hidden_aliases = {_a.name: alias_command(_a, cli) for _a in ALIASES}
for _name, _text in SHORT_HELP.items():
    cli.commands[_name].short_help = _text
for _name, _text in {"rebuild": "Rebuild consume queues and index with Spark into a new directory.",
                     "verify": "Check every record, consume queues and index with Spark.",
                     "export": "Export every message to Parquet with Spark.",
                     "stats": "Full-scan statistics with Spark."}.items():
    commands_spark.spark.commands[_name].short_help = _text


def main() -> None:
    cli(prog_name="rmqstore")


if __name__ == "__main__":
    main()
