"""rmqstore.testing: the pytest plugin (registered by the package's pytest11 entry point) and the
context manager start ``rmqstore serve`` on a free loopback port and a temporary store, and an
unmodified RocketMQ client (the C++ client, PyPI rocketmq 0.4.4) produces and consumes through it."""
from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap

import pytest

from rmqstore import MessageStore
from rmqstore.testing import BrokerStartError, RunningBroker, serve_broker


@pytest.fixture
def rmqstore_broker_conf() -> dict:  # the plugin's fixture, overridden as a user would
    return {"brokerName": "plugin-test", "autoCreateTopicEnable": True}


def test_the_fixture_yields_a_name_server_a_real_client_produces_and_consumes_through(
        rocketmq_namesrv, rmqstore_broker, cpp_client, request):
    assert request.config.pluginmanager.has_plugin("rmqstore")  # loaded through the entry point
    assert rocketmq_namesrv == rmqstore_broker.namesrv_addr and rocketmq_namesrv.startswith("127.0.0.1:")
    assert rmqstore_broker.broker_name == "plugin-test"  # rmqstore_broker_conf was used
    sent = cpp_client("produce", "--namesrv", rocketmq_namesrv, "--group", "PG", "--topic", "AppTopic",
                      "--count", 20, "--tags", "A")
    assert len([s for s in sent if s.get("status") == 0]) == 20
    got = [x for x in cpp_client("push", "--namesrv", rocketmq_namesrv, "--group", "CG", "--topic", "AppTopic",
                                 "--count", 20, "--timeout", 60) if "keys" in x]
    assert sorted(m["body"] for m in got) == sorted(f"body-{i}" for i in range(20))
    assert "client connected" in rmqstore_broker.log()


def test_the_context_manager_starts_stops_and_cleans_up(tmp_path):
    with serve_broker(broker_conf={"brokerName": "cm"}) as b:
        assert isinstance(b, RunningBroker) and b.broker_name == "cm" and b.grpc_endpoint is None
        host, port = b.namesrv_addr.rsplit(":", 1)
        socket.create_connection((host, int(port)), timeout=5).close()  # accepting connections
        assert os.path.isdir(b.store_dir) and b.start_seconds > 0
        own = b.store_dir
    assert b.process.returncode == 0 and not os.path.exists(own)  # stopped cleanly, its own store removed
    kept = tmp_path / "kept"
    with serve_broker(kept) as b:
        pass
    assert b.process.returncode == 0
    with MessageStore.open(str(kept), read_only=True) as st:  # a store given is left, closed cleanly
        assert st.recovery_report.clean


def test_a_broker_that_cannot_start_says_why(tmp_path):
    d = tmp_path / "not-a-store"
    d.mkdir()
    (d / "notes.txt").write_text("mine")
    with pytest.raises(BrokerStartError, match="neither a message store nor an empty directory"):
        with serve_broker(d):
            pass
    assert [p.name for p in d.iterdir()] == ["notes.txt"]


def test_the_plugin_loads_in_any_project(tmp_path):
    """A project that only installed rmqstore: its tests ask for ``rocketmq_namesrv`` and get one."""
    (tmp_path / "test_app.py").write_text(textwrap.dedent("""
        import socket

        def test_app(rocketmq_namesrv):
            host, port = rocketmq_namesrv.rsplit(":", 1)
            socket.create_connection((host, int(port)), timeout=5).close()
    """))
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app.py"],
                       cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0 and "1 passed" in p.stdout, p.stdout + p.stderr
