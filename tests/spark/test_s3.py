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
def moto(tmp_path_factory):
    """moto's S3 server on a loopback port, with an empty bucket: its endpoint and a pyarrow filesystem."""
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
        yield {"endpoint": endpoint, "fs": fs}
    finally:
        proc.terminate()
        proc.wait(10)
        log.close()


@pytest.fixture(scope="module")
def s3(moto, vectors, generated):
    """The vector stores and the generated store uploaded: ``stores[name]`` = (local path, s3:// location)."""
    import pyarrow.fs as pafs

    uploaded = {}
    stores = {name: vs.path for name, vs in vectors.items()}
    stores["generated"] = generated.path
    for name, path in stores.items():  # the source needs only the commitlog; the jobs' vectors all of it
        sub = "commitlog" if name == "generated" else ""
        pafs.copy_files(os.path.join(path, sub).rstrip("/"), f"{BUCKET}/{name}/store/{sub}".rstrip("/"),
                        destination_filesystem=moto["fs"])
        uploaded[name] = (path, f"s3://{BUCKET}/{name}/store")
    return {**moto, "stores": uploaded}


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


# ------------------------------------------------------------------------------------------------
# An index geometry other than upstream's 1:4, told by the index files' contents
# ------------------------------------------------------------------------------------------------

#: 100 slots, 1,000 items: 20,440-byte index files, not 40 + 84 * slots
GEO = dict(max_hash_slot_num=100, max_index_num=1000)


@pytest.fixture(scope="module")
def geo(moto, tmp_path_factory):
    """Two stores, local and uploaded: ``told`` (written with :data:`GEO`: 120 messages with keys,
    240 index items in one index file, the rest of it zeros) and ``untold`` (a commitlog segment and
    a 220-byte index file with no item: 40 + 4*10 + 20*7, no 1:4 geometry)."""
    import pyarrow.fs as pafs

    from rmqstore import MessageStore

    from tests.kit import cfg, msg

    root = tmp_path_factory.mktemp("geo")
    told = root / "told" / "store"
    with MessageStore.open(str(told), cfg(GEO)) as st:
        for i in range(120):
            st.put_message(msg("Geo", b"x" * 40, i=i, keys=[f"k{i}"]))
        st.wait_dispatched()
    untold = root / "untold" / "store"
    (untold / "commitlog").mkdir(parents=True)
    (untold / "commitlog" / f"{0:020d}").write_bytes(bytes(4096))
    (untold / "index").mkdir()
    (untold / "index" / "20240131235959123").write_bytes(bytes(220))
    out = {}
    for name, path in (("told", told), ("untold", untold)):
        pafs.copy_files(str(path), f"{BUCKET}/geo-{name}/store", destination_filesystem=moto["fs"])
        out[name] = (str(path), f"s3://{BUCKET}/geo-{name}/store")
    return out


def _geometry(c) -> tuple:
    return c.mapped_file_size_commit_log, c.cq_file_size, c.max_hash_slot_num, c.max_index_num


def test_an_s3_store_of_another_index_geometry_infers_it_as_locally(moto, geo, monkeypatch):
    """Read from the index file's contents with ranged reads: from its end backwards a chunk at a
    time (lowered here to 1 KiB) to the last item written, then the slots and items written."""
    from rmqstore.layout import infer_config
    from rmqstore.spark import fs as RFS
    from rmqstore.spark.options import parse_options

    local, remote = geo["told"]
    ranges = []
    ranged = RFS._ranged

    def spy(f, pos, n):
        ranges.append((pos, n))
        return ranged(f, pos, n)

    monkeypatch.setattr(RFS, "READ_CHUNK", 1024)
    monkeypatch.setattr(RFS, "_ranged", spy)
    want = infer_config(local)
    assert _geometry(want) == (4096, 1000, 100, 1000)
    got = parse_options({"path": remote, **_opts(moto)}, streaming=False).cfg
    assert got == want
    size, used_end = 40 + 4 * 100 + 20 * 1000, 40 + 4 * 100 + 20 * 241  # the file; the end of item 240
    backward = [r for r in ranges if r[0] + r[1] > used_end]
    assert backward == [(e - 1024, 1024) for e in range(size, 0, -1024)][:len(backward)]  # chunk by chunk
    assert backward[-1][0] < used_end <= backward[-2][0]  # to the chunk holding the last item, no further
    assert len(backward) > 10 and all(pos + n <= used_end for pos, n in ranges if (pos, n) not in backward)
    (name,) = os.listdir(os.path.join(local, "index"))
    assert RFS.index_geometry(remote, f"index/{name}", size) == (100, 1000)
    assert RFS.index_geometry(remote, f"index/{name}", size - 20) is None  # not the size listed: not read as it


@pytest.mark.parametrize("given", [{}, {"maxHashSlotNum": "64", "maxIndexNum": "256"}])
def test_a_config_that_contradicts_the_index_files_gives_way_remotely_as_locally(moto, geo, given, monkeypatch):
    """As a local store in the data source (``infer_config``: the files' sizes win over the options),
    whatever the options say; options that fit the files are taken as given, without reading them."""
    from rmqstore.spark import fs as RFS
    from rmqstore.spark.options import parse_options

    local, remote = geo["told"]
    here = parse_options({"path": local, **given}, streaming=False).cfg
    there = parse_options({"path": remote, **given, **_opts(moto)}, streaming=False).cfg
    assert here == there and _geometry(there)[2:] == (100, 1000)

    def unread(*a):
        raise AssertionError("an index file was read")

    monkeypatch.setattr(RFS, "_ranged", unread)
    fitting = {"maxHashSlotNum": "100", "maxIndexNum": "1000"}
    assert parse_options({"path": remote, **fitting, **_opts(moto)}, streaming=False).cfg == here


def test_an_s3_store_whose_index_geometry_cannot_be_told_fails_as_locally(moto, geo):
    from rmqstore.errors import ConfigError
    from rmqstore.spark.options import parse_options

    local, remote = geo["untold"]
    errors = []
    for path, extra in ((local, {}), (remote, _opts(moto))):
        with pytest.raises(ConfigError) as e:
            parse_options({"path": path, **extra}, streaming=False)
        assert e.value.path == path + "/index"
        errors.append(str(e.value).replace(path, "STORE"))
    assert errors[0] == errors[1]
    assert "220 bytes, not upstream's 1:4 slot:item ratio" in errors[0]
    assert "maxHashSlotNum and maxIndexNum" in errors[0]
    given = {"maxHashSlotNum": "10", "maxIndexNum": "7"}
    assert _geometry(parse_options({"path": remote, **given, **_opts(moto)}, streaming=False).cfg)[2:] == (10, 7)


def test_jobs_over_an_s3_store_of_another_index_geometry_answer_as_locally(spark, moto, geo, tmp_path):
    """stats reads the index files with the store's geometry; rebuild writes index files of it,
    the bytes the in-process rebuild of the local copy writes."""
    from rmqstore.rebuild import rebuild as rebuild_in_process
    from rmqstore.spark.jobs import rebuild, stats

    from test_locations import _strip
    from test_rebuild import same_output

    local, remote = geo["told"]
    here, there = stats(spark, local, top=5), stats(spark, remote, top=5, options=_opts(moto))
    profile = there["hash_collisions"]["index_files"]
    assert there["hash_collisions"]["slots"] == 100 and [p["items"] for p in profile] == [240]
    assert _strip(there) == _strip(here)
    rebuild(spark, remote, str(tmp_path / "from-s3"), options=_opts(moto))
    rebuild_in_process(local, str(tmp_path / "in-process"))
    same_output(str(tmp_path / "in-process"), str(tmp_path / "from-s3"))
    index = tmp_path / "from-s3" / "index"
    assert [os.path.getsize(index / f) for f in os.listdir(index)] == [40 + 4 * 100 + 20 * 1000]
