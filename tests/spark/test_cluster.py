"""A real Spark standalone cluster on loopback (a master and two workers started from the installed
PySpark, nothing downloaded): the ``rocketmq`` source and the jobs answer exactly as on ``local[2]``."""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import pyspark

from tests.kit import free_port

SPARK_HOME = os.path.dirname(pyspark.__file__)


def _env(**extra: str) -> dict[str, str]:
    """This process's environment with ``extra``, and PYTHONPATH made absolute: executors run in
    the workers' work directories and would resolve a relative entry there (a test run from a git
    worktree with ``PYTHONPATH=src`` then imports the installed package instead)."""
    env = dict(os.environ, **extra)
    if env.get("PYTHONPATH"):
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(p) for p in env["PYTHONPATH"].split(os.pathsep) if p)
    return env


def _spark_class(cls: str, *args: str, log: Path) -> subprocess.Popen:
    env = _env(SPARK_HOME=SPARK_HOME, PYSPARK_PYTHON=sys.executable, SPARK_LOCAL_IP="127.0.0.1")
    fh = open(log, "w")
    return subprocess.Popen([os.path.join(SPARK_HOME, "bin", "spark-class"), cls, *args], stdout=fh,
                            stderr=subprocess.STDOUT, env=env)


def _wait_for(log: Path, text: str, count: int = 1, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if log.exists() and log.read_text(errors="replace").count(text) >= count:
            return
        time.sleep(0.3)
    raise AssertionError(f"{text!r} not seen {count}x in {log}:\n{log.read_text(errors='replace')[-3000:]}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    port = free_port()
    url = f"spark://127.0.0.1:{port}"
    procs = [_spark_class("org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port", str(port),
                          "--webui-port", "0", log=d / "master.log")]
    try:
        _wait_for(d / "master.log", "I have been elected leader")
        for i in range(2):
            procs.append(_spark_class("org.apache.spark.deploy.worker.Worker", url, "--host", "127.0.0.1",
                                      "--cores", "1", "--memory", "1g", "--webui-port", "0",
                                      "--work-dir", str(d / f"work{i}"), log=d / f"worker{i}.log"))
        _wait_for(d / "master.log", "Registering worker", count=2)
        yield url
    finally:
        for p in reversed(procs):
            p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()


def answers(spark, out: str, job_store: str, stores: list[str]) -> dict:
    """What the source and the jobs answer on ``spark``: every row of the stores (digest), the
    partitions, the stats of ``job_store``; ``job_store`` rebuilt into ``out``."""
    from rmqstore.layout import resolve_config
    from rmqstore.spark import jobs

    df = spark.read.format("rocketmq").option("splitSize", "64k").load(stores)
    rows = sorted((r.brokerName, r.commitLogOffset, r.topic, r.queueId, r.queueOffset, r.msgId,
                   hashlib.sha1(bytes(r.body)).hexdigest(), sorted(r.properties.items())) for r in df.collect())
    cfg = resolve_config(job_store, None)
    stats = jobs.stats(spark, job_store, cfg)
    for k in ("seconds", "steps"):
        stats.pop(k, None)
    jobs.rebuild(spark, job_store, out, cfg)
    return json.loads(json.dumps({"n": len(rows), "partitions": df.rdd.getNumPartitions(),
                                  "digest": hashlib.sha1(json.dumps(rows).encode()).hexdigest(), "stats": stats},
                                 default=str))


_JOB = r"""
import json, sys
sys.path.insert(0, sys.argv[1])
import test_cluster
from rmqstore.spark import jobs
master, out, job_store, *stores = sys.argv[2:]
spark = jobs.get_spark(master)
got = test_cluster.answers(spark, out, job_store, stores)
got["executors"] = sorted(set(spark.sparkContext.parallelize(range(8), 8).map(
    lambda _: __import__("socket").gethostname() + str(__import__("os").getppid())).collect()))
import rmqstore
got["package"] = rmqstore.__file__
got["executor_packages"] = sorted(set(spark.sparkContext.parallelize(range(4), 4).map(
    lambda _: __import__("rmqstore").__file__).collect()))
print(json.dumps(got))
"""


def _run(master: str, out: Path, job_store, *stores) -> dict:
    env = _env(PYSPARK_PYTHON=sys.executable)
    p = subprocess.run([sys.executable, "-c", _JOB, os.path.dirname(__file__), master, str(out), str(job_store),
                        *map(str, stores)], capture_output=True, text=True, timeout=600, env=env)
    lines = [x for x in p.stdout.splitlines() if x.startswith("{")]
    assert p.returncode == 0 and lines, p.stderr[-3000:]
    return json.loads(lines[-1])


def _tree(root: Path) -> list[tuple[str, str]]:
    """(path, content hash) of every file; index files (named by their creation time) by content only."""
    out = []
    for f in sorted(root.rglob("*")):
        if f.is_file():
            rel = str(f.relative_to(root))
            out.append(("index/*" if rel.startswith("index/") else rel, hashlib.sha1(f.read_bytes()).hexdigest()))
    return out


def test_source_and_jobs_answer_the_same_on_a_standalone_cluster(spark, cluster, vectors, tmp_path):
    names = ("basic", "propcrc", "rollover")
    stores = [vectors[n].path for n in names]
    job_store = vectors["rollover"].path
    local = answers(spark, str(tmp_path / "local"), str(job_store), [str(x) for x in stores])  # this session: local[2]
    remote = _run(cluster, tmp_path / "cluster", job_store, *stores)
    assert remote["n"] == local["n"] == sum(len(vectors[n].messages()) for n in names)
    assert remote["digest"] == local["digest"] and remote["partitions"] == local["partitions"] > 2
    assert len(remote["executors"]) == 2  # both workers' executors ran tasks
    # the executors run the code under test, not another copy of the package (a relative PYTHONPATH
    # would be resolved in the workers' directories)
    assert remote["executor_packages"] == [remote["package"]]
    assert remote["package"] == __import__("rmqstore").__file__
    assert remote["stats"] == local["stats"] and remote["stats"]
    tree = _tree(tmp_path / "local")
    assert _tree(tmp_path / "cluster") == tree and any(k.startswith("consumequeue") for k, _ in tree)
    assert any(k == "index/*" for k, _ in tree)
