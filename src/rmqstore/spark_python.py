"""Which Python Spark runs the ``rocketmq`` data source in, set before a session starts.

The interpreter-start hook (``rmqstore-spark.pth`` loading ``_rmqstore_spark_env``) does this when
the environment's interpreter first imports pyspark. ``import rmqstore`` does the same for a program
whose environment lacks the hook (the package put on ``sys.path`` by hand): it names this
interpreter, once, when nothing is set yet and no Spark context runs, and with a context already
running it says in one warning what to do. No pyspark import.
"""
from __future__ import annotations

import importlib.util
import os
import sys
import warnings

import _rmqstore_spark_env as hook

ENV = hook.ENV


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
    return hook.name_interpreter(environ)
