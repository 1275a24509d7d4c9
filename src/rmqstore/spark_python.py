"""Which Python Spark runs the ``rocketmq`` data source in, set before a session starts.

Spark looks Python data sources up, plans and reads them in worker processes running
``$PYSPARK_PYTHON``, else ``$PYSPARK_DRIVER_PYTHON``, else ``python3`` from ``PATH``, as the JVM's
environment had them when the session started. A program run with a virtualenv's interpreter
without activating it gets the system's ``python3``, which has no rmqstore (nor pyspark): Spark
answers ``DATA_SOURCE_NOT_FOUND`` with a long Java trace. ``import rmqstore`` (and so ``import
rmqstore.spark``) therefore names this interpreter, once, when nothing is set yet and no Spark
context runs; with a context already running it says in one warning what to do. No pyspark import.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import sys
import warnings

log = logging.getLogger(__name__)
ENV = ("PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON")


def spark_python_default(environ=os.environ) -> str | None:
    """Set ``PYSPARK_DRIVER_PYTHON`` to this interpreter when pyspark is installed and neither
    variable is set; the value set, or None. Warns (once) when a SparkContext already runs without
    either: its workers will not find the ``rocketmq`` source."""
    if any(environ.get(k) for k in ENV) or not sys.executable:
        return None
    if importlib.util.find_spec("pyspark") is None:
        return None
    session = sys.modules.get("pyspark.sql.session")  # imported only if a program uses Spark already
    if session is not None and session.SparkSession.getActiveSession() is not None:
        warnings.warn(f"rmqstore was imported after the SparkSession started, and neither PYSPARK_PYTHON nor "
                      f"PYSPARK_DRIVER_PYTHON is set: format('rocketmq') will not be found; import rmqstore "
                      f"before building the session, or set PYSPARK_PYTHON={sys.executable}", RuntimeWarning,
                      stacklevel=3)
        return None
    environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return sys.executable
