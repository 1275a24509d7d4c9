"""The Spark export: every record to Parquet, partitioned by topic and day."""
from __future__ import annotations

import os
import time

from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from ...config import MessageStoreConfig
from ...errors import OutputExistsError
from .runtime import job_split_size, read_store, stores


# ================================================================================================
# export
# ================================================================================================

def export(spark: SparkSession, store_dir, out_dir: str, cfg: MessageStoreConfig | None = None,
           include_body: bool = False, options: dict | None = None) -> dict:
    """Every record to Parquet under ``out_dir``, partitioned by ``topic`` and ``date`` (the UTC day
    of the store time, ``yyyy-MM-dd``), every column of the source (``body`` only with
    ``include_body``; ``brokerName`` tells the stores apart when several are read: ``store_dir`` is
    anything :func:`stores` takes). ``out_dir`` may be any path Spark writes to (``s3a://`` with
    Hadoop's S3 connector on the classpath); it must not exist.
    Returns ``rows``, ``files``, ``out_dir``, ``seconds``."""
    t0 = time.perf_counter()
    locs = stores(store_dir, cfg, options)
    if "://" not in out_dir:
        out_dir = os.path.abspath(out_dir)
        if os.path.exists(out_dir):
            raise OutputExistsError("export output already exists", path=out_dir)
    df = read_store(spark, [loc.store_dir for loc in locs], cfg, includeBody=include_body,
                    splitSize=job_split_size(spark, locs), **(options or {}))
    if not include_body:
        df = df.drop("body")
    day = F.date_from_unix_date(F.floor(F.unix_millis("storeTimestamp") / 86_400_000).cast("int"))
    df = df.withColumn("date", F.date_format(day, "yyyy-MM-dd"))
    df.repartition("topic", "date").write.partitionBy("topic", "date").parquet(out_dir)
    written = spark.read.parquet(out_dir)
    return {"rows": written.count(), "files": len(written.inputFiles()), "out_dir": out_dir,
            "seconds": time.perf_counter() - t0}
