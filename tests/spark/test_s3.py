"""Stores in S3-compatible object storage (moto's standalone server on loopback, from PyPI): the
``rocketmq`` source reads RocketMQ's vector stores and a generated multi-segment store there exactly
as it reads them locally, with ranged reads by the executors; the jobs take S3 locations, and
``rebuild`` from S3 into S3 writes the in-process rebuild's bytes."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time

import pytest

from tests.kit import free_port, spark_row

BUCKET = "rmq-archive"


@pytest.fixture(scope="module")
def s3(tmp_path_factory, vectors, generated):
    server = os.path.join(os.path.dirname(sys.executable), "moto_server")  # the one installed with the tests
    if not os.path.exists(server):
        server = shutil.which("moto_server")
    port = free_port()
    log = open(tmp_path_factory.mktemp("moto") / "moto.log", "w")
    proc = subprocess.Popen([server, "-H", "127.0.0.1", "-p", str(port)], stdout=log, stderr=subprocess.STDOUT)
    endpoint = f"http://127.0.0.1:{port}"
    try:
        import pyarrow.fs as pafs

        deadline = time.time() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.time() < deadline and proc.poll() is None, "moto_server did not start"
                time.sleep(0.2)
        fs = pafs.S3FileSystem(endpoint_override=f"127.0.0.1:{port}", scheme="http", access_key="test",
                               secret_key="test", region="us-east-1", allow_bucket_creation=True)
        fs.create_dir(BUCKET)
        uploaded = {}
        stores = {name: vs.path for name, vs in vectors.items()}
        stores["generated"] = generated.path
        for name, path in stores.items():  # the source needs only the commitlog; the jobs' vectors all of it
            sub = "commitlog" if name == "generated" else ""
            pafs.copy_files(os.path.join(path, sub).rstrip("/"), f"{BUCKET}/{name}/store/{sub}".rstrip("/"),
                            destination_filesystem=fs)
            uploaded[name] = (path, f"s3://{BUCKET}/{name}/store")
        yield {"endpoint": endpoint, "stores": uploaded, "fs": fs}
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


def _opts(s3) -> dict:
    return {"s3.endpoint": s3["endpoint"], "s3.accessKey": "test", "s3.secretKey": "test", "s3.region": "us-east-1"}


def _rows(spark, path, **options) -> dict:
    r = spark.read.format("rocketmq")
    for k, v in options.items():
        r = r.option(k, v)
    out = {}
    for row in r.load(path).collect():
        d = spark_row(row)
        out[(d["brokerName"], d["commitLogOffset"])] = d
    return out


@pytest.mark.parametrize("name", ["basic", "propcrc", "rollover"])
def test_a_store_in_s3_reads_exactly_as_locally(spark, s3, name):
    local, remote = s3["stores"][name]
    want = _rows(spark, local, splitSize="16k")
    got = _rows(spark, remote, splitSize="16k", **_opts(s3))  # several splits per segment: ranged reads
    assert len(got) == len(want) > 0
    assert got == want  # every column of every row


def _digest(spark, path, **options) -> tuple:
    """(rows, XOR of a 64-bit hash of every row's every column): computed by Spark, not collected."""
    from pyspark.sql import functions as F

    r = spark.read.format("rocketmq")
    for k, v in options.items():
        r = r.option(k, v)
    df = r.load(path)
    cols = [F.to_json(c) if c in ("properties", "keys") else F.col(c) for c in df.columns]
    row = df.select(F.xxhash64(*cols).alias("h")).agg(F.count("*").alias("n"), F.bit_xor("h").alias("x")).first()
    return row.n, row.x


def test_a_multi_segment_store_in_s3_reads_exactly_as_locally(spark, s3, generated):
    local, remote = s3["stores"]["generated"]
    want = _digest(spark, local, splitSize="2m")
    assert want[0] > 100_000  # the generated store: 200,000 messages in 1 MiB segments
    assert _digest(spark, remote, splitSize="2m", **_opts(s3)) == want


def test_several_s3_stores_and_a_glob(spark, s3):
    names = ("basic", "propcrc", "rollover", "generated")
    r = spark.read.format("rocketmq")
    for k, v in _opts(s3).items():
        r = r.option(k, v)
    df = r.load(f"s3://{BUCKET}/*/store")
    local = sum(spark.read.format("rocketmq").load(s3["stores"][n][0]).count() for n in names)
    assert df.count() == local
    assert {x.brokerName for x in df.select("brokerName").distinct().collect()} == {"store"}  # directory names


def test_s3_errors_name_what_is_wrong(spark, s3):
    from rmqstore.errors import ConfigError, StoreNotFoundError
    from rmqstore.spark.options import parse_options

    with pytest.raises(StoreNotFoundError, match="no store directory matches"):
        parse_options({"path": f"s3://{BUCKET}/nothing-*/store", **_opts(s3)}, streaming=False)
    with pytest.raises(StoreNotFoundError, match="commitlog"):
        parse_options({"path": f"s3://{BUCKET}/missing/store", **_opts(s3)}, streaming=False)
    with pytest.raises(ConfigError, match="a stream follows one local store"):
        parse_options({"path": s3["stores"]["basic"][1], **_opts(s3)}, streaming=True)


def test_spark_rebuild_from_s3_into_s3_is_byte_identical(spark, s3, vectors, tmp_path):
    import pyarrow.fs as pafs

    from rmqstore.rebuild import rebuild as rebuild_in_process
    from rmqstore.errors import OutputExistsError
    from rmqstore.spark.jobs import rebuild

    from tests.kit import SPLITS
    from test_rebuild import same_output

    vs = vectors["rollover"]  # several segments, consume queues and index files
    local, remote = s3["stores"]["rollover"]
    out = f"s3://{BUCKET}/rebuilt/rollover"
    res = rebuild(spark, remote, out, vs.config, split_size=SPLITS["rollover"], options=_opts(s3),
                  staging_dir=str(tmp_path))
    assert os.listdir(tmp_path) == []  # the staging directory is gone
    assert res["out_dir"] == out and res["uploaded_bytes"] > 0 and "upload" in res["steps"]
    pafs.copy_files(f"{BUCKET}/rebuilt/rollover", str(tmp_path / "from-s3"), source_filesystem=s3["fs"])
    want = rebuild_in_process(local, str(tmp_path / "in-process"), vs.config)
    same_output(str(tmp_path / "in-process"), str(tmp_path / "from-s3"))
    assert (res["records"], res["consume_queues"], res["index_files"], res["end_offset"]) == \
           (want.records, want.consume_queues, want.index_files, want.end_offset)
    with pytest.raises(OutputExistsError, match="already holds consumequeue"):
        rebuild(spark, remote, out, vs.config, options=_opts(s3))


def test_stats_and_verify_of_s3_stores(spark, s3, vectors):
    from rmqstore.spark.jobs import stats, verify

    from test_locations import _strip

    local, remote = s3["stores"]["basic"]
    cfg = vectors["basic"].config
    here, there = stats(spark, local, cfg, top=5), stats(spark, remote, cfg, top=5, options=_opts(s3))
    assert there["records"] == len(vectors["basic"].messages()) > 0
    assert there["hash_collisions"]["index_files"]  # the index files, read from S3
    assert _strip(there) == _strip(here)
    findings, summary = verify(spark, remote, cfg, options=_opts(s3))
    _, alone = verify(spark, local, cfg)
    assert (summary["records"], summary["problems"], findings.count()) == (alone["records"], 0, 0)
    assert "a remote store" in summary["skipped"] and "skipped" not in alone


@pytest.mark.parametrize("given", ["none", "embedded"])
def test_spark_rebuild_of_an_s3_store_takes_the_stores_own_sizes(spark, s3, vectors, tmp_path, given):
    """No config (or the embedded preset, as `rmqstore spark rebuild` passes): the consume-queue
    files (1,000 bytes in this store) and index geometry come from the store's own objects, as
    `rmqstore rebuild` infers them from a local copy; the two rebuilds write the same bytes."""
    from rmqstore import MessageStoreConfig
    from rmqstore.rebuild import rebuild as rebuild_in_process
    from rmqstore.spark.jobs import rebuild
    from rmqstore.spark.jobs.runtime import stores

    from test_rebuild import same_output

    local, remote = s3["stores"]["rollover"]
    cfg = None if given == "none" else MessageStoreConfig.embedded()
    (loc,) = stores(remote, cfg, _opts(s3))
    want_cfg = vectors["rollover"].config
    assert (loc.cfg.cq_file_size, loc.cfg.mapped_file_size_commit_log, loc.cfg.index_file_size) == \
           (1000, want_cfg.mapped_file_size_commit_log, want_cfg.index_file_size)
    rebuild(spark, remote, str(tmp_path / "from-s3"), cfg, options=_opts(s3))
    rebuild_in_process(local, str(tmp_path / "in-process"), cfg)
    same_output(str(tmp_path / "in-process"), str(tmp_path / "from-s3"))
    sizes = {os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(tmp_path / "from-s3" / "consumequeue")
             for f in fs}
    assert sizes == {1000}


def test_spark_rebuild_cli_refuses_an_occupied_s3_output_before_spark_starts(s3, monkeypatch):
    from click.testing import CliRunner

    from rmqstore.cli import commands_spark
    from rmqstore.cli.main import cli

    def started(*a, **k):
        raise AssertionError("Spark was started")

    monkeypatch.setattr(commands_spark, "open_session", started)
    with s3["fs"].open_output_stream(f"{BUCKET}/occupied/index/20240101000000000") as f:
        f.write(b"someone else's index file")
    env = {"AWS_ENDPOINT_URL": s3["endpoint"], "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
           "AWS_REGION": "us-east-1"}
    r = CliRunner().invoke(cli, ["spark", "rebuild", f"s3://{BUCKET}/occupied", "--store", s3["stores"]["basic"][1]],
                           env=env)
    assert r.exit_code == 2 and "already holds index/" in r.stderr, r.output
    with s3["fs"].open_input_stream(f"{BUCKET}/occupied/index/20240101000000000") as f:
        assert f.read() == b"someone else's index file"
