"""pytest fixtures for application tests against a real RocketMQ broker (``rmqstore serve``),
registered with pytest by the package's ``pytest11`` entry point: installing rmqstore is enough.

* ``rocketmq_namesrv``: the name-server address (``"127.0.0.1:PORT"``) of a broker started for the
  test on a temporary store (clients' ``namesrvAddr``).
* ``rmqstore_broker``: the :class:`~rmqstore.testing.RunningBroker` itself (``namesrv_addr``,
  ``store_dir``, ``grpc_endpoint``, ``log()``).
* ``rmqstore_broker_conf``: the broker.conf keys the broker starts with (empty: the defaults);
  override this fixture in a ``conftest.py`` to configure it.

Each test gets its own broker (it starts in well under a second); for one broker per session,
write a session-scoped fixture around :func:`rmqstore.testing.serve_broker`.
"""
from __future__ import annotations

from typing import Iterator

import pytest

from . import RunningBroker, serve_broker


@pytest.fixture
def rmqstore_broker_conf() -> dict:
    """broker.conf keys for ``rmqstore_broker`` (override to configure the broker)."""
    return {}


@pytest.fixture
def rmqstore_broker(rmqstore_broker_conf: dict) -> Iterator[RunningBroker]:
    """A broker and name server (``rmqstore serve``) on a free loopback port and a temporary
    store, stopped cleanly and removed after the test."""
    with serve_broker(broker_conf=rmqstore_broker_conf) as broker:
        yield broker


@pytest.fixture
def rocketmq_namesrv(rmqstore_broker: RunningBroker) -> str:
    """The name-server address of ``rmqstore_broker`` (``"127.0.0.1:PORT"``)."""
    return rmqstore_broker.namesrv_addr
