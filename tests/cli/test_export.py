"""``rmqstore export`` (Parquet, JSON Lines, CSV without Spark) and what ``rmqstore load`` makes of
its output and of ``browse --json``: a slice round-trips byte for byte."""
from __future__ import annotations

import base64
import csv
import io
import json

import pyarrow.parquet as pq
import pytest

from rmqstore import Message, MessageStore, MessageStoreConfig


def _config_file(vs, path) -> str:
    """The vector's store config as a broker.conf (what `load --config` reads)."""
    lines = [f"{k}={v}" for k, v in json.loads((vs.store.parent / "input.json").read_text())["config"].items()]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def _commitlog(store) -> dict[str, bytes]:
    d = store / "commitlog"
    return {f.name: f.read_bytes() for f in sorted(d.iterdir())}


@pytest.mark.parametrize("name", ["basic", "propcrc", "rollover"])
def test_export_jsonl_then_load_writes_rocketmqs_commitlog_byte_for_byte(run, vectors, tmp_path, name):
    vs = vectors.load(name)
    out = tmp_path / "slice.jsonl"
    r = run.json("export", out, "--format", "jsonl", "--store", vs.store)
    assert r["messages"] == len(vs.expected["putResults"]) and r["skipped"] == 0
    copy = tmp_path / "copy"
    loaded = run.json("load", out, "--store", copy, "--create", "--config", _config_file(vs, tmp_path / "b.conf"))
    assert loaded["messages"] == r["messages"]
    want, got = _commitlog(vs.store), _commitlog(copy)
    assert sorted(got) == sorted(want)
    for seg, data in want.items():
        end = loaded["end_phy_offset"] - int(seg)
        assert got[seg][:max(0, end)] == data[:max(0, end)], seg  # up to the end of data


def test_browse_json_loads_back_byte_for_byte(run, vectors, tmp_path):
    vs = vectors.load("basic")
    lines = run.ok("browse", "--json", "--store", vs.store).stdout
    (tmp_path / "b.jsonl").write_text(lines)
    copy = tmp_path / "copy"
    loaded = run.json("load", tmp_path / "b.jsonl", "--store", copy, "--create")
    n = loaded["end_phy_offset"]
    seg = "00000000000000000000"
    assert (copy / "commitlog" / seg).read_bytes()[:n] == (vs.store / "commitlog" / seg).read_bytes()[:n]


def test_a_browsed_compressed_message_loads_as_its_decoded_body(run, tmp_path):
    """browse shows a compressed body decoded; load stores that body without the compression bits."""
    import zlib

    src = tmp_path / "src"
    body = b"compress me " * 500
    with MessageStore.open(src, MessageStoreConfig.embedded()) as st:
        st.put_message(Message(topic="Z", body=zlib.compress(body), sys_flag=0x1 | (3 << 8),
                               properties={"UNIQ_KEY": "AB" * 16}))
    line = run.ok("browse", "--json", "--store", src).stdout
    assert json.loads(line)["compression"] == "zlib"
    (tmp_path / "z.jsonl").write_text(line)
    run.json("load", tmp_path / "z.jsonl", "--store", tmp_path / "copy", "--create")
    with MessageStore.open(tmp_path / "copy", read_only=True) as st:
        rec = st.look_message_by_offset(0)
        assert rec.body == body and rec.sys_flag & 0x701 == 0 and rec.properties == {"UNIQ_KEY": "AB" * 16}
    # export keeps the stored bytes and flags instead
    run.json("export", tmp_path / "z2.jsonl", "--format", "jsonl", "--store", src)
    d = json.loads((tmp_path / "z2.jsonl").read_text())
    assert d["body_encoding"] == "base64" and base64.b64decode(d["body"]) == zlib.compress(body)
    assert d["sys_flag"] == 0x1 | (3 << 8)


def test_parquet_and_csv_have_the_sources_columns(run, vectors, tmp_path, truth):
    t = truth("basic")
    pq_out = tmp_path / "m.parquet"
    run.json("export", pq_out, "--format", "parquet", "--store", t.store)
    table = pq.read_table(pq_out)
    assert table.num_rows == len(t.rows)
    by_phy = {r["commitLogOffset"]: r for r in table.to_pylist()}
    for row in t.rows:
        got = by_phy[row["phy"]]
        assert (got["topic"], got["queueId"], got["queueOffset"], got["msgId"], got["body"]) == \
            (row["topic"], row["queue_id"], row["queue_offset"], row["msg_id"], row["body"])
        assert dict(got["properties"]) == row["props"]
    csv_text = run.ok("export", "-", "--format", "csv", "--topic", "TopicTest", "--no-body", "--store",
                      t.store).stdout
    rows = list(csv.DictReader(io.StringIO(csv_text)))
    want = [r for r in t.rows if r["topic"] == "TopicTest"]
    assert len(rows) == len(want) and "body" not in rows[0]
    first = min(want, key=lambda r: r["phy"])
    got = next(r for r in rows if int(r["commitLogOffset"]) == first["phy"])
    assert json.loads(got["properties"]) == first["props"]
    assert got["keys"] == " ".join(first["props"].get("KEYS", "").split())


def test_time_window_and_topic_filter(run, truth, tmp_path):
    t = truth("basic")
    times = sorted(r["store_ts"] for r in t.rows)
    begin, end = times[5], times[20]
    out = tmp_path / "w.jsonl"
    r = run.json("export", out, "--format", "jsonl", "--begin", begin, "--end", end, "--store", t.store)
    got = [json.loads(x) for x in out.read_text().splitlines()]
    assert r["messages"] == len(got) == sum(1 for ts in times if begin <= ts < end)
    assert all(begin <= d["store_timestamp"] < end for d in got)


def test_export_refusals(run, vectors, tmp_path):
    vs = vectors.load("basic")
    out = tmp_path / "exists.jsonl"
    out.write_text("x")
    r = run("export", out, "--format", "jsonl", "--store", vs.store)
    assert r.exit_code == 2 and "exists" in r.stderr
    assert out.read_text() == "x"
    r = run("export", "-", "--format", "parquet", "--store", vs.store)
    assert r.exit_code == 2 and "parquet needs a file" in r.stderr
    r = run("export", tmp_path / "n.csv", "--format", "csv", "--store", tmp_path / "nowhere")
    assert r.exit_code != 0
