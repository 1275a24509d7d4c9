"""``rmqstore spark rebuild|verify|export|stats``: the Spark jobs of :mod:`rmqstore.spark.jobs`
on one store or several (read-only; rebuild and export write only their output directory).
``--store`` takes what the ``rocketmq`` source takes: a directory, a glob, a ``file:`` URI, an
``s3://``/``s3a://``/``hdfs://`` location (S3 endpoint and keys from the standard AWS environment
variables), and may be repeated."""
from __future__ import annotations

import contextlib
import functools
import os
import sys
import tempfile

import click

from .common import STORE_ENV, RmqGroup, StoreCommand, debug_option, json_option
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


def store_locations(f):
    """``--store`` (repeatable), ``--config``, ``--json``, ``--debug``; passes a :class:`StoreCommand`
    whose ``locations`` are the stores given (default: as every command's ``--store``)."""

    @functools.wraps(f)
    def wrapper(*args, store: tuple[str, ...], config: str | None, json_mode: bool, **kwargs):
        cmd = StoreCommand(store[0] if len(store) == 1 else None, config, json_mode)
        cmd.locations = list(store) or [cmd.store_path]
        return f(cmd, *args, **kwargs)

    wrapper = debug_option(json_option(wrapper))
    wrapper = click.option("--config", "config", type=click.Path(dir_okay=False, exists=True), default=None,
                           metavar="BROKER_CONF",
                           help="broker.conf-style properties for every store (segment sizes come from each "
                                "store's files anyway).")(wrapper)
    return click.option("--store", "store", multiple=True, envvar=STORE_ENV, metavar="LOCATION",
                        help="Store: a directory, a glob, file:, s3://, s3a:// or hdfs:// (S3 settings from the "
                             "AWS_* environment variables); repeat for several stores (answered per broker). "
                             f"Default: ${STORE_ENV}, else storePathRootDir from --config.")(wrapper)


def open_session(cmd: StoreCommand, master: str | None):
    """(jobs module, SparkSession, config); checks a single local store before starting a JVM."""
    from ..config import MessageStoreConfig
    from ..errors import StoreNotFoundError
    from ..layout import is_store_dir

    local = [p for p in cmd.locations if "://" not in p and not p.startswith("file:") and not set("*?[") & set(p)]
    for p in local:
        if not is_store_dir(p):
            raise StoreNotFoundError("not a message store (no commitlog/, consumequeue/ or checkpoint)"
                                     if os.path.isdir(p) else "store directory does not exist", path=p)
    props = cmd.broker_properties()
    cfg = MessageStoreConfig.from_properties(props) if props else MessageStoreConfig.embedded()
    jobs = _jobs()
    with cmd.out.status("starting Spark"), jvm_log() as log_path:
        try:
            spark = jobs.get_spark(master=master or os.environ.get("SPARK_MASTER"))
        except Exception as e:  # noqa: BLE001 - Java missing, bad master URL, ...
            first = str(e).splitlines()[0] if str(e) else ""
            raise SparkUnavailableError(f"cannot start Spark: {type(e).__name__}: {first} (the JVM's log: {log_path})"
                                        ) from e
    return jobs, spark, cfg


@contextlib.contextmanager
def jvm_log():
    """While Spark starts, the process's standard error (file descriptor 2, which the JVM inherits
    for its whole life) goes to a log file: the JVM's start-up notices and log4j lines do not reach
    the terminal. The file is removed once Spark has started (the JVM keeps writing into it
    unseen; a job's failure reaches Python as an exception); it is kept, and named, when the start
    fails."""
    fd, path = tempfile.mkstemp(prefix="rmqstore-spark-", suffix=".log")
    sys.stderr.flush()
    saved = os.dup(2)
    os.dup2(fd, 2)
    os.close(fd)
    started = False
    try:
        yield path
        started = True
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        if started:
            os.unlink(path)


def _check_output(cmd: StoreCommand, out_dir: str, what: str) -> None:
    """An output that exists is refused before Spark starts: rebuild's must be new or empty (a
    remote one must not hold consumequeue/ or index/; S3 settings from the AWS_* environment
    variables), export's new (a remote export is left to Spark, which refuses it)."""
    if "://" in out_dir:
        if what.startswith("rebuild") and out_dir.split("://", 1)[0] in ("s3", "s3a", "hdfs"):
            _check_remote_rebuild_output(out_dir)
        return
    from ..rebuild import check_new_output

    source = next((loc for loc in cmd.locations if "://" not in loc
                   and os.path.abspath(loc) == os.path.abspath(out_dir)), None)
    check_new_output(out_dir, source, what, must_not_exist=what.startswith("export"))


def _check_remote_rebuild_output(out_dir: str) -> None:
    from ..errors import OutputExistsError
    from ..io import paths

    try:
        from ..spark import fs as remote
    except ImportError as e:
        raise SparkUnavailableError(f"Spark support is not available: {e}") from e
    settings = remote.s3_settings()
    for sub in (paths.CONSUMEQUEUE, paths.INDEX):
        if remote.exists(out_dir, settings, sub):
            raise OutputExistsError(f"rebuild output location already holds {sub}/", path=out_dir)


def _where(cmd: StoreCommand):
    """The store argument of a job: the one location, or the list of them."""
    return cmd.locations[0] if len(cmd.locations) == 1 else list(cmd.locations)


def _label(cmd: StoreCommand) -> str:
    return ", ".join(cmd.locations)


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
@store_locations
def spark_rebuild(cmd: StoreCommand, out_dir: str, master: str | None) -> None:
    """Rebuild consume queues and index files from the commitlog with Spark into OUT_DIR (WRITES
    only OUT_DIR, which must be new or empty; the store is read, never changed). Output is byte-identical to `rmqstore rebuild`."""
    _check_output(cmd, out_dir, "rebuild output")
    jobs, sp, cfg = open_session(cmd, master)
    with cmd.out.status("Spark rebuild"):
        res = jobs.rebuild(sp, _where(cmd), out_dir, cfg=cfg)
    _show(cmd, f"Spark rebuild of {_label(cmd)} into {out_dir}", res)


@spark.command("verify")
@click.option("--limit", type=click.IntRange(0), default=50, show_default=True,
              help="Findings to list (0 = the summary only).")
@MASTER
@store_locations
def spark_verify(cmd: StoreCommand, limit: int, master: str | None) -> None:
    """The checks of `rmqstore verify` (CRCs, queue offsets, consume queues, index, checkpoint, tail)
    in parallel with Spark; read-only. Exit 12 when there are findings."""
    jobs, sp, cfg = open_session(cmd, master)
    with cmd.out.status("Spark verify"):
        df, summary = jobs.verify(sp, _where(cmd), cfg=cfg)
        rows = [r.asDict(recursive=True) for r in df.limit(limit).collect()] if limit else []
    problems = _problem_count(summary, df)
    result = {"store": _where(cmd), "ok": problems == 0, "summary": summary, "findings": rows}
    _show(cmd, f"Spark verify of {_label(cmd)}", result)
    if problems:
        raise ProblemsFoundError(f"Spark verify found {problems} problem(s) in {_label(cmd)}",
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
@store_locations
def spark_export(cmd: StoreCommand, out_dir: str, include_body: bool, master: str | None) -> None:
    """Export every message (all fields, bodies with --include-body) to Parquet in OUT_DIR with
    Spark (WRITES only OUT_DIR, which must not exist; the store is read, never changed)."""
    _check_output(cmd, out_dir, "export output")
    jobs, sp, cfg = open_session(cmd, master)
    with cmd.out.status("Spark export"):
        res = jobs.export(sp, _where(cmd), out_dir, cfg=cfg, include_body=include_body)
    _show(cmd, f"Spark export of {_label(cmd)} into {out_dir}", res)


@spark.command("stats")
@click.option("--top", type=click.IntRange(1), default=10, show_default=True, help="How many top keys/tags/topics.")
@MASTER
@store_locations
def spark_stats(cmd: StoreCommand, top: int, master: str | None) -> None:
    """Full-scan statistics of the commitlog with Spark (topics, tags, sizes, time range); read-only."""
    jobs, sp, cfg = open_session(cmd, master)
    with cmd.out.status("Spark stats"):
        res = jobs.stats(sp, _where(cmd), cfg=cfg, top=top)
    _show(cmd, f"Spark stats of {_label(cmd)}", res)


COMMANDS = [spark]
