"""``spark.read.format("rocketmq")`` in a plain SparkSession (no get_spark, no registration, no
``import rmqstore``, no PYSPARK_* variables, no virtualenv on PATH): the interpreter-start hook names
the interpreter for Spark's workers; with workers that lack rmqstore the program ends in one line
naming the fix, never a Java trace; and a topic the store does not hold warns once instead of
answering an empty table without a word."""
from __future__ import annotations

import logging
import subprocess
import sys
import textwrap

from rmqstore import Message, MessageStore
from rmqstore.spark.options import parse_options
from rmqstore.spark.source import warn_unknown_topics


def _store(path) -> str:
    with MessageStore.open(str(path)) as st:
        for i in range(3):
            st.put_message(Message.create("Orders", b"o%d" % i))
        st.wait_dispatched()
    return str(path)


def test_a_plain_session_finds_the_source_and_an_unknown_topic_warns_once(tmp_path):
    store = _store(tmp_path / "store")
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        print("rows", spark.read.format("rocketmq").load({store!r}).count(), flush=True)
        nope = spark.read.format("rocketmq").option("topics", "Nope").load({store!r})
        print("nope", nope.count(), nope.count(), flush=True)
    """)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path)}  # python3 on PATH has no rmqstore
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "rows 3" in p.stdout and "nope 0 0" in p.stdout
    assert "DATA_SOURCE_NOT_FOUND" not in p.stderr
    assert p.stderr.count("topic Nope: not in") == 1, p.stderr[-3000:]


def test_workers_without_rmqstore_end_in_one_line_naming_the_fix(tmp_path):
    store = _store(tmp_path / "store")
    bare = tmp_path / "bare-python"  # an interpreter without site-packages: no pyspark, no rmqstore
    bare.write_text(f"#!/bin/sh\nexec {sys.executable} -S \"$@\"\n")
    bare.chmod(0o755)
    script = textwrap.dedent(f"""
        from pyspark.sql import SparkSession
        spark = SparkSession.builder.master("local[1]").config("spark.ui.enabled", "false").getOrCreate()
        spark.sparkContext.setLogLevel("ERROR")
        spark.read.format("rocketmq").load({store!r}).count()
    """)
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "PYSPARK_PYTHON": str(bare)}
    p = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=300)
    assert p.returncode == 1
    assert "\tat org.apache" not in p.stderr and "Traceback" not in p.stderr, p.stderr[-3000:]
    last = p.stderr.strip().splitlines()[-1]
    assert last == (f"<string>:5: format('rocketmq') not found: Spark's Python workers run {bare}, which has no "
                    f"rmqstore; set PYSPARK_PYTHON={sys.executable} (an interpreter with rmqstore installed) "
                    f"before the SparkSession starts")


def test_unknown_topics_warn_once_per_store(tmp_path, caplog):
    store = _store(tmp_path / "store")
    opts = parse_options({"path": store}, streaming=False)
    with caplog.at_level(logging.WARNING, logger="rmqstore"):
        assert warn_unknown_topics(opts, frozenset({"Orders", "Gone"})) == ["Gone"]
        assert warn_unknown_topics(opts, frozenset({"Gone"})) == []  # once
        assert warn_unknown_topics(opts, frozenset({"Orders"})) == []
    lines = [r.getMessage() for r in caplog.records if "not in" in r.getMessage()]
    assert lines == [f"topic Gone: not in {store} (its topics: Orders); the read has no rows of it"]
    bare = tmp_path / "commitlog-only"
    (bare / "commitlog").mkdir(parents=True)
    for f in (tmp_path / "store" / "commitlog").iterdir():
        (bare / "commitlog" / f.name).write_bytes(f.read_bytes())
    assert warn_unknown_topics(parse_options({"path": str(bare)}, streaming=False), frozenset({"X"})) == []
