"""Spark pipeline for RocketMQ stores: the ``rocketmq`` data source and the jobs in :mod:`.jobs`.

``from rmqstore.spark import RocketMQDataSource; spark.dataSource.register(RocketMQDataSource)``,
then ``spark.read.format("rocketmq").load("/path/to/store")``. This package is the only place
that imports pyspark; ``import rmqstore`` never does.
"""
from .source import RocketMQDataSource

__all__ = ["RocketMQDataSource"]
