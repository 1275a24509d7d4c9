"""A RocketMQ broker for application tests: ``rmqstore serve`` in its own process, on a free
loopback port and a temporary store, for tests of RocketMQ clients in any language (no JVM, no
container).

Without pytest::

    from rmqstore.testing import serve_broker

    with serve_broker() as broker:
        run_my_app(namesrv=broker.namesrv_addr)   # e.g. "127.0.0.1:40123"

With pytest the fixtures of :mod:`rmqstore.testing.plugin` come with the package (the ``pytest11``
entry point): ``rocketmq_namesrv`` (the name-server address), ``rmqstore_broker`` (the
:class:`RunningBroker`) and ``rmqstore_broker_conf`` (override it to configure the broker).
"""
from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Iterator, Mapping

from ..io.paths import BROKER_CONF

__all__ = ["BrokerStartError", "RunningBroker", "serve_broker"]

#: what the broker's stderr log keeps for an error message
_LOG_TAIL = 4000


class BrokerStartError(RuntimeError):
    """``rmqstore serve`` exited, or did not say it listens, within the start timeout (the message
    holds the end of its log)."""


@dataclass
class RunningBroker:
    """A broker started by :func:`serve_broker`: clients use ``namesrv_addr`` (remoting: the
    name server and the broker are one address) or ``grpc_endpoint`` (5.x clients, when started
    with ``grpc=True``)."""

    namesrv_addr: str
    store_dir: str
    grpc_endpoint: str | None
    broker_name: str
    process: subprocess.Popen = field(repr=False)
    log_path: str = field(repr=False)
    #: seconds from starting the process to the address accepting connections
    start_seconds: float = 0.0

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        """What the broker logged so far (its stderr)."""
        with open(self.log_path, encoding="utf-8", errors="replace") as fh:
            return fh.read()

    def stop(self, timeout: float = 30.0) -> int:
        """SIGTERM, then wait for the clean close (SIGKILL after ``timeout`` s); the exit status."""
        p = self.process
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
            try:
                p.wait(timeout)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if p.stdout is not None:
            p.stdout.close()
        return p.returncode


def _write_conf(path: str, conf: Mapping[str, object]) -> None:
    import javaproperties

    with open(path, "w", encoding="latin-1") as fh:
        javaproperties.dump({str(k): str(v).lower() if isinstance(v, bool) else str(v) for k, v in conf.items()},
                            fh, timestamp=False)


def _read_listening(p: subprocess.Popen, timeout: float, log_path: str) -> dict:
    """The JSON listening line ``serve --json`` prints once it accepts connections."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        ready, _, _ = select.select([p.stdout], [], [], max(0.0, left))
        if ready:
            line = p.stdout.readline()
            if line.startswith("{"):
                return json.loads(line)
        if p.poll() is not None or not ready:
            with open(log_path, encoding="utf-8", errors="replace") as fh:
                log = fh.read()[-_LOG_TAIL:]
            what = f"exited with status {p.returncode}" if p.poll() is not None else \
                f"did not listen within {timeout:g} s"
            raise BrokerStartError(f"rmqstore serve {what}:\n{log}")


def _start(store_dir: str, conf_path: str | None, log_path: str, grpc: bool, timeout: float,
           env: Mapping[str, str] | None) -> RunningBroker:
    argv = [sys.executable, "-m", "rmqstore.cli.main", "serve", "--store", store_dir, "--listen", "127.0.0.1:0",
            "--json"]
    if grpc:
        argv += ["--grpc-listen", "127.0.0.1:0"]
    if conf_path is not None:
        argv += ["--config", conf_path]
    t0 = time.perf_counter()
    with open(log_path, "ab") as log:
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, text=True,
                             env=None if env is None else {**os.environ, **env})
    try:
        info = _read_listening(p, timeout, log_path)
    except BaseException:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdout.close()
        raise
    return RunningBroker(info["namesrv_addr"], info["store"], info.get("grpc"), info["broker_name"], p, log_path,
                         time.perf_counter() - t0)


@contextlib.contextmanager
def serve_broker(store_dir: str | os.PathLike | None = None, *, broker_conf: Mapping[str, object] | None = None,
                 grpc: bool = False, start_timeout: float = 30.0,
                 env: Mapping[str, str] | None = None) -> Iterator[RunningBroker]:
    """Start ``rmqstore serve`` on ``127.0.0.1`` (a port the system picks: no clash between tests
    running at once) and yield the :class:`RunningBroker` once it accepts connections; stop it
    cleanly at the end.

    ``store_dir`` None: a new temporary directory, removed at the end (a directory given is left as
    it is). ``broker_conf``: broker.conf keys (``brokerName``, ``autoCreateTopicEnable``,
    ``messageDelayLevel``, ``mappedFileSizeCommitLog``, ...). ``grpc``: also serve the gRPC
    endpoint of the 5.x clients (``grpc_endpoint``). ``env``: extra environment of the server.
    Raises :class:`BrokerStartError` with the end of the server's log if it does not start."""
    own = store_dir is None
    root = tempfile.mkdtemp(prefix="rmqstore-broker-")
    try:
        store = os.path.join(root, "store") if own else os.fspath(store_dir)
        conf_path = None
        if broker_conf:
            conf_path = os.path.join(root, BROKER_CONF)
            _write_conf(conf_path, broker_conf)
        broker = _start(store, conf_path, os.path.join(root, "serve.log"), grpc, start_timeout, env)
        try:
            yield broker
        finally:
            broker.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)  # made here: the log, the config and (own) the store
