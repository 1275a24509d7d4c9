"""The internal data sources of the stats job (registered by :func:`.jobs.register`; not for users).

Without pandas, PySpark moves data between Python and the JVM as Arrow batches only through the
Python Data Source API, so the stats job, whose rows Spark SQL aggregates, reads data sources (each
takes one option, ``spec``, a JSON document the job writes on the driver):

* ``rmqstore_keys``, ``rmqstore_index_profile``: the index keys of every record, and per index
  file its items, used slots and longest chain (stats).
"""
from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
from pyspark.sql.types import BooleanType, IntegerType, LongType, StringType, StructField, StructType

from ..format import index_file as FI
from ..format import message as M
from . import fs as RFS
from . import scan as S
from .tasks import FilesPartition, SpansPartition, SpecReader, SpecSource, cfg_from_json, open_fs

# ================================================================================================
# Index keys of every record (stats)
# ================================================================================================

KEYS_SCHEMA = StructType([
    StructField("topic", StringType(), False),
    StructField("key", StringType(), False),
    StructField("uniq", BooleanType(), False),     # the UNIQ_KEY (else a KEYS token)
    StructField("hash", IntegerType(), False),     # index key hash of "topic#key"
    StructField("pos", LongType(), False),
])


class KeysReader(SpecReader):
    """The index keys of every record (UNIQ_KEY, then each KEYS token; none for ROLLBACK), with the
    hash the index files them under: spec ``store``, ``cfg``, ``groups`` (``[[span id, segment
    start, start, end], ...]`` per partition)."""

    def partitions(self):
        return [SpansPartition(i, g) for i, g in enumerate(self.spec["groups"])]

    def read(self, partition):
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..format.hashes import abs_key_hash_many, java_hash_many
        from .columns import TopicDecoder, parse_properties_batch

        cfg = cfg_from_json(self.spec["cfg"])
        open_fs(self.spec)
        arrow_schema = to_arrow_schema(self.schema, timezone="UTC")
        topics = TopicDecoder()
        for _, seg0, a, b in partition.spans:
            for seg, batch in S.iter_span_batches(self.spec["store"], cfg.mapped_file_size_commit_log,
                                                  S.Span(seg0, a, b)):
                props = parse_properties_batch(seg.u8, batch.props_pos, batch.props_len)
                names = topics.names
                codes = topics.codes(seg.mm, batch).tolist()
                uniq = props.value_of("UNIQ_KEY").to_pylist()
                keys = props.keys_array().to_pylist()
                rollback = ((batch.sys_flag & M.SYSFLAG_TX_MASK) == M.TX_ROLLBACK).tolist()
                pos = (batch.starts + seg.start).tolist()
                t_out, k_out, u_out, p_out = [], [], [], []
                for i in range(len(batch)):
                    if rollback[i]:
                        continue
                    t = names[codes[i]]
                    if uniq[i] is not None:
                        t_out.append(t), k_out.append(uniq[i]), u_out.append(True), p_out.append(pos[i])
                    for k in keys[i]:
                        t_out.append(t), k_out.append(k), u_out.append(False), p_out.append(pos[i])
                if not k_out:
                    continue
                hashes = abs_key_hash_many(java_hash_many([f"{t}#{k}" for t, k in zip(t_out, k_out)]))
                yield pa.RecordBatch.from_arrays([
                    pa.array(t_out, pa.string()), pa.array(k_out, pa.string()), pa.array(u_out, pa.bool_()),
                    pa.array(hashes.astype(np.int32), pa.int32()), pa.array(p_out, pa.int64())], schema=arrow_schema)


# ================================================================================================
# Index file profile (stats)
# ================================================================================================

INDEX_PROFILE_SCHEMA = StructType([
    StructField("file", StringType(), False),
    StructField("items", IntegerType(), False),
    StructField("slotsUsed", IntegerType(), False),
    StructField("longestChain", IntegerType(), False),
    StructField("hashSlotCount", IntegerType(), False),
    StructField("beginTs", LongType(), False),
    StructField("endTs", LongType(), False),
])


class IndexProfileReader(SpecReader):
    """One row per index file: items, slots holding items, longest slot chain, header values.
    Spec ``{"groups": [[path, ...], ...], "slots": n, "items": n}``."""

    def partitions(self):
        return [FilesPartition(i, g) for i, g in enumerate(self.spec["groups"])]

    def read(self, partition):
        from pyspark.sql.pandas.types import to_arrow_schema

        from ..io.mapped_file import MappedFile

        slots, items = self.spec["slots"], self.spec["items"]
        store = self.spec.get("store")
        open_fs(self.spec)
        rows = []
        for path in partition.files:
            if store is not None and RFS.is_remote(store):  # the header, slot table and items: all of it
                size = FI.file_size(slots, items)
                mf = RFS.remote_mapping(store, f"index/{path}", size, 0, size)
            else:
                mf = MappedFile(path, FI.file_size(slots, items), read_only=True)
            try:
                begin_ts, end_ts, _, _, slot_count, count = FI.HEADER.unpack_from(mf.mm, 0)
                count = min(max(count, 1), items)
                arr = np.frombuffer(mf.mm, dtype=FI.ITEM_DTYPE, count=count, offset=FI.item_pos(slots, 0))[1:]
                chain = np.bincount(arr["key_hash"].astype(np.int64) % slots, minlength=1) if arr.size else \
                    np.zeros(1, dtype=np.int64)
                rows.append({"file": os.path.basename(path), "items": int(arr.size),
                             "slotsUsed": int(np.count_nonzero(chain)), "longestChain": int(chain.max()),
                             "hashSlotCount": int(slot_count), "beginTs": int(begin_ts), "endTs": int(end_ts)})
                del arr
            finally:
                mf.close()
        if rows:
            yield pa.RecordBatch.from_pylist(rows, schema=to_arrow_schema(self.schema, timezone="UTC"))


class KeysSource(SpecSource):
    NAME, SCHEMA, READER = "rmqstore_keys", KEYS_SCHEMA, KeysReader


class IndexProfileSource(SpecSource):
    NAME, SCHEMA, READER = "rmqstore_index_profile", INDEX_PROFILE_SCHEMA, IndexProfileReader


INTERNAL_SOURCES = (KeysSource, IndexProfileSource)
