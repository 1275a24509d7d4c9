"""``rmqstore spark rebuild|verify|export|stats``: the Spark jobs of :mod:`rmqstore.spark.jobs`
on a store directory (read-only; rebuild and export write only their output directory)."""
from __future__ import annotations

import os

import click

from .common import RmqGroup, StoreCommand, debug_option, store_options
from .errors import ProblemsFoundError, SparkUnavailableError
from .render import render_mapping, to_jsonable

MASTER = click.option("--master", default=None, metavar="URL",
                      help="Spark master (default: $SPARK_MASTER or local[*]), e.g. local[2] or spark://host:7077.")


def _jobs():
    try:
        from ..spark import jobs
    except ImportError as e:
        raise SparkUnavailableError(f"Spark support is not available: {e}") from e
    return jobs


def _session(cmd: StoreCommand, master: str | None):
    """(jobs module, SparkSession, config); checks the store before starting a JVM."""
    from ..errors import StoreNotFoundError
    from ..layout import is_store_dir

    if not is_store_dir(cmd.store_path):
        raise StoreNotFoundError("not a message store (no commitlog/, consumequeue/ or checkpoint)"
                                 if os.path.isdir(cmd.store_path) else "store directory does not exist",
                                 path=cmd.store_path)
    cfg = cmd.config()
    jobs = _jobs()
    with cmd.out.status("starting Spark"):
        try:
            spark = jobs.get_spark(master=master or os.environ.get("SPARK_MASTER"))
        except Exception as e:  # noqa: BLE001 - Java missing, bad master URL, ...
            raise SparkUnavailableError(f"cannot start Spark: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
                                        ) from e
    return jobs, spark, cfg


def _show(cmd: StoreCommand, title: str, result) -> None:
    if cmd.json:
        cmd.out.emit(result)
    else:
        render_mapping(cmd.out, title, result)


@click.group(cls=RmqGroup)
@debug_option
def spark() -> None:
    """Spark jobs over a store (PySpark, local or on a cluster with --master)."""


@spark.command("rebuild")
@click.argument("out_dir", type=click.Path(file_okay=False))
@MASTER
@store_options
def spark_rebuild(cmd: StoreCommand, out_dir: str, master: str | None) -> None:
    """Rebuild consume queues and index files from the commitlog with Spark into OUT_DIR (WRITES
    only OUT_DIR; the store is read, never changed). Output is byte-identical to `rmqstore rebuild`."""
    jobs, sp, cfg = _session(cmd, master)
    with cmd.out.status("Spark rebuild"):
        res = jobs.rebuild(sp, cmd.store_path, out_dir, cfg=cfg)
    _show(cmd, f"Spark rebuild of {cmd.store_path} into {out_dir}", res)


@spark.command("verify")
@click.option("--limit", type=click.IntRange(0), default=50, show_default=True,
              help="Findings to list (0 = the summary only).")
@MASTER
@store_options
def spark_verify(cmd: StoreCommand, limit: int, master: str | None) -> None:
    """The checks of `rmqstore verify` (CRCs, queue offsets, consume queues, index, checkpoint, tail)
    in parallel with Spark; read-only. Exit 12 when there are findings."""
    jobs, sp, cfg = _session(cmd, master)
    with cmd.out.status("Spark verify"):
        df, summary = jobs.verify(sp, cmd.store_path, cfg=cfg)
        rows = [r.asDict(recursive=True) for r in df.limit(limit).collect()] if limit else []
    problems = _problem_count(summary, df)
    result = {"store": cmd.store_path, "ok": problems == 0, "summary": summary, "findings": rows}
    _show(cmd, f"Spark verify of {cmd.store_path}", result)
    if problems:
        raise ProblemsFoundError(f"Spark verify found {problems} problem(s) in {cmd.store_path}",
                                 hint="see the findings; `rmqstore verify --fix` repairs consume queues and index")


def _problem_count(summary, df) -> int:
    s = to_jsonable(summary)
    if isinstance(s, dict) and isinstance(s.get("problems"), int):
        return s["problems"]
    return df.count()


@spark.command("export")
@click.argument("out_dir", type=click.Path(file_okay=False))
@click.option("--include-body", is_flag=True, help="Also export message bodies.")
@MASTER
@store_options
def spark_export(cmd: StoreCommand, out_dir: str, include_body: bool, master: str | None) -> None:
    """Export every message (all fields, bodies with --include-body) to Parquet in OUT_DIR with
    Spark (WRITES only OUT_DIR; the store is read, never changed)."""
    jobs, sp, cfg = _session(cmd, master)
    with cmd.out.status("Spark export"):
        res = jobs.export(sp, cmd.store_path, out_dir, cfg=cfg, include_body=include_body)
    _show(cmd, f"Spark export of {cmd.store_path} into {out_dir}", res)


@spark.command("stats")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True, help="How many top keys/tags/topics.")
@MASTER
@store_options
def spark_stats(cmd: StoreCommand, top: int, master: str | None) -> None:
    """Full-scan statistics of the commitlog with Spark (topics, tags, sizes, time range); read-only."""
    jobs, sp, cfg = _session(cmd, master)
    with cmd.out.status("Spark stats"):
        res = jobs.stats(sp, cmd.store_path, cfg=cfg, top=top)
    _show(cmd, f"Spark stats of {cmd.store_path}", res)


COMMANDS = [spark]
