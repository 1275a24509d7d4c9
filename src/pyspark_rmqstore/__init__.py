"""Automatic registration of the ``rocketmq`` data source with PySpark.

PySpark (4.0 and later) looks for top-level modules named ``pyspark_*`` on the Python path when a
session first resolves a data source name, and registers each module's ``DefaultSource``. Installing
rmqstore is therefore enough for ``spark.read.format("rocketmq")`` and for SQL's
``CREATE TABLE t USING rocketmq OPTIONS (path '/path/to/store')``: no ``spark.dataSource.register``.
"""
from rmqstore.spark.source import RocketMQDataSource as DefaultSource

__all__ = ["DefaultSource"]
