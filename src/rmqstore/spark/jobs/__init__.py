"""Spark jobs over a store: ``rebuild``, ``verify``, ``export``, ``stats`` (one module each, over
:mod:`.runtime`).

Every job reads the store through executors only: the driver lists the commitlog (file names and
sizes; for ``rebuild`` also where the last segment's data seems to end, a few 4 KiB reads to weigh
the work), plans byte ranges and collects small summaries. Data moves between Python and the JVM as
Arrow batches through the Python Data Source API (:mod:`rmqstore.spark.tasks`), and Spark SQL does the
shuffles, sorts and aggregations; ``rebuild``, which moves no rows, runs its two stages as RDD jobs
of planned tasks (cheaper to launch). Outputs (``rebuild``, ``export``) are written by executors, so
on a cluster the store and output paths must be visible to every executor (a shared filesystem).

Every job takes what the ``rocketmq`` source takes (:func:`stores`): a store directory, a ``file:``
URI, a glob, an ``s3://``/``s3a://``/``hdfs://`` location, or a list of them. Several stores are
run one after the other, each on all the cores, and answered per broker (``stores``) with totals.
A remote store is read by the executors with ranged reads (:mod:`rmqstore.spark.fs`); ``rebuild`` writes a
remote output through a local staging directory (``staging_dir``) that executor tasks upload.
"""
from __future__ import annotations

from .export_job import export
from .rebuild_job import (MAX_STEAL_PIECE, MAX_TASK_BYTES, MIN_STEAL_PIECE, QUEUE_FIXED_WEIGHT, SHARD_FIXED_WEIGHT,
                          STEAL_PIECES, dispatch_tasks, index_shard_weight, plan_index_shards, queue_write_weight,
                          rebuild, steal_piece)
from .runtime import MIN_JOB_SPLIT, get_spark, job_split_size, read_store, register, source_options, stores
from .stats_job import stats
from .verify_job import FINDINGS_SCHEMA, verify

__all__ = ["FINDINGS_SCHEMA", "MAX_STEAL_PIECE", "MAX_TASK_BYTES", "MIN_JOB_SPLIT", "MIN_STEAL_PIECE",
           "QUEUE_FIXED_WEIGHT", "SHARD_FIXED_WEIGHT", "STEAL_PIECES", "dispatch_tasks", "export", "get_spark",
           "index_shard_weight", "job_split_size", "plan_index_shards", "queue_write_weight", "read_store", "rebuild",
           "register", "source_options", "stats", "steal_piece", "stores", "verify"]
