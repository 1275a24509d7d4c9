"""``rmqstore serve``: the broker and name server in one process (a thin command over
:class:`rmqstore.broker.Broker`)."""
from __future__ import annotations

import asyncio
import errno
import ipaddress
import json
import logging
import os
import signal
import socket
import sys
import time

import click

from .common import STORE_ENV, StoreCommand, debug_option, json_option
from .errors import AddressInUseError


class _LineHandler(logging.Handler):
    """One plain line per event on stderr (time, level when not INFO, message)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            level = "" if record.levelno == logging.INFO else f"{record.levelname.lower()}: "
            stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
            click.echo(f"{stamp} {level}{record.getMessage()}", err=True)
        except Exception:  # noqa: BLE001 - logging must never break the server
            pass


@click.command()
@click.option("--store", "store", type=click.Path(file_okay=False), default=None, envvar=STORE_ENV, metavar="DIR",
              help="Store directory (created when missing). Default: $RMQSTORE_STORE, else storePathRootDir from "
                   "--config, else data/store.")
@click.option("--config", "config", type=click.Path(dir_okay=False, exists=True), default=None, metavar="BROKER_CONF",
              help="broker.conf (RocketMQ's keys: brokerName, brokerClusterName, autoCreateTopicEnable, "
                   "defaultTopicQueueNums, flushDiskType, maxMessageSize, messageDelayLevel, brokerIP1, listenPort...).")
@click.option("--listen", default="127.0.0.1:9876", show_default=True, metavar="HOST:PORT",
              help="Address of the name server and the broker (clients' namesrvAddr).")
@click.option("--grpc-listen", default=None, metavar="HOST:PORT",
              help="Also serve RocketMQ 5's gRPC MessagingService (the proxy protocol of the 5.x clients) here; "
                   "127.0.0.1:8081 is the usual port. Default: off.")
@click.option("--grpc-tls-cert", type=click.Path(dir_okay=False, exists=True), default=None, metavar="PEM",
              help="TLS certificate chain for the gRPC endpoint (with --grpc-tls-key). Default: plaintext.")
@click.option("--grpc-tls-key", type=click.Path(dir_okay=False, exists=True), default=None, metavar="PEM",
              help="TLS private key for the gRPC endpoint (with --grpc-tls-cert).")
@click.option("--namesrv-addr", default=None, envvar="NAMESRV_ADDR", metavar="HOST:PORT;...",
              help="Register with these name servers ('a:9876;b:9876', every 30 s, unregistering at shutdown) "
                   "instead of being the name server. Default: $NAMESRV_ADDR, else namesrvAddr from --config, "
                   "else none (one process is broker and name server).")
@click.option("--http-listen", default=None, metavar="HOST:PORT",
              help="Also serve HTTP here: Prometheus /metrics (RocketMQ 5's metric names), the JSON admin API under "
                   "/api/ and the web console at /. Needs the `http` extra. Default: off.")
@click.option("--http-admin", is_flag=True,
              help="Allow the API's writes (create/delete topic, reset offsets, resend a DLQ message, verify) to "
                   "callers sending `Authorization: Bearer $RMQSTORE_HTTP_TOKEN`. Default: read-only.")
@click.option("--http-token", default=None, envvar="RMQSTORE_HTTP_TOKEN", metavar="TOKEN",
              help="The bearer token of --http-admin (better given as $RMQSTORE_HTTP_TOKEN: not in `ps`).")
@click.option("--read-only", is_flag=True, help="Serve reads only: routes are read-only, sends get NO_PERMISSION, "
                                                "nothing in the store changes.")
@json_option
@debug_option
def serve(store: str | None, config: str | None, listen: str, grpc_listen: str | None, grpc_tls_cert: str | None,
          grpc_tls_key: str | None, namesrv_addr: str | None, http_listen: str | None, http_admin: bool,
          http_token: str | None, read_only: bool, json_mode: bool) -> None:
    """Run a RocketMQ broker and name server on the store (WRITES, unless --read-only): unmodified
    RocketMQ clients (remoting protocol; with --grpc-listen also the 5.x gRPC clients) produce, consume
    and query against it. Stops cleanly on
    SIGINT/SIGTERM (exit 0). With --json the listening line is a JSON object."""
    from ..broker import Broker, BrokerConfig
    from ..layout import is_store_dir
    from ..message_store import MessageStore

    cmd = StoreCommand(store, config, False)
    bcfg = BrokerConfig.from_properties(cmd.broker_properties())
    _check_grpc_options(grpc_listen, grpc_tls_cert, grpc_tls_key)
    _check_namesrv_addr(namesrv_addr)
    http = _http_options(http_listen, http_admin, http_token)
    if read_only and not is_store_dir(cmd.store_path):
        raise click.UsageError(f"--read-only needs an existing store (path={cmd.store_path})")
    _check_store_dir(cmd, read_only)
    for opt, addr in (("--listen", listen), ("--grpc-listen", grpc_listen)):
        if addr:
            check_address_free(opt, addr)
    handler = log_handler()
    log = logging.getLogger("rmqstore")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    st = MessageStore.open(cmd.store_path, cmd.config(), read_only=read_only)
    try:
        tls = (grpc_tls_cert, grpc_tls_key) if grpc_tls_cert and grpc_tls_key else None
        try:
            broker = Broker(st, bcfg, listen=listen, grpc_listen=grpc_listen, grpc_tls=tls, namesrv_addr=namesrv_addr,
                            http=http)
        except ValueError as e:  # a role the config does not allow (a SLAVE with brokerId 0)
            raise click.UsageError(str(e)) from None

        async def main() -> None:
            loop = asyncio.get_running_loop()
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, broker.request_stop)
            await broker.start_async()
            _announce(broker, bcfg, st.path, read_only, tls is not None, json_mode)
            sys.stdout.flush()
            await broker.wait_stopped()
            await broker.stop_async()

        asyncio.run(main())
    finally:
        st.close()
        log.removeHandler(handler)
    click.echo("stopped: store closed cleanly", err=True)


def _check_grpc_options(grpc_listen: str | None, grpc_tls_cert: str | None, grpc_tls_key: str | None) -> None:
    if (grpc_tls_cert is None) != (grpc_tls_key is None):
        raise click.UsageError("--grpc-tls-cert and --grpc-tls-key go together")
    if (grpc_tls_cert or grpc_tls_key) and not grpc_listen:
        raise click.UsageError("--grpc-tls-cert/--grpc-tls-key need --grpc-listen")


def parse_address(opt: str, value: str) -> tuple[str, int]:
    """``IP:PORT`` (``[v6]:PORT``) of a listen option, else a usage error naming the option (a host
    name is refused: brokers advertise the address to clients, which need an IP)."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise click.UsageError(f"{opt}: {value!r} is not IP:PORT (e.g. 127.0.0.1:9876)")
    try:
        ipaddress.ip_address(host)
    except ValueError:
        raise click.UsageError(f"{opt}: {host!r} is not an IP address; give IP:PORT, e.g. 127.0.0.1:{port} "
                               "(clients are told this address: a host name is not resolved)") from None
    return host, int(port)


def check_address_free(opt: str, value: str) -> None:
    """Refuse, before the store is opened or created, an address another process listens on
    (:class:`AddressInUseError`) or one this machine does not have (a usage error)."""
    host, port = parse_address(opt, value)
    if port == 0:
        return
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as the server binds (TIME_WAIT is no conflict)
        try:
            s.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                raise AddressInUseError(f"address in use: another process listens on {host}:{port} ({opt})") from None
            if e.errno == errno.EADDRNOTAVAIL:
                raise click.UsageError(f"{opt}: {host} is not an address of this machine") from None
            raise


def _check_store_dir(cmd: StoreCommand, read_only: bool) -> None:
    """A writable serve creates a store only where the directory is missing or empty, and refuses
    a store whose lock a live process holds, before anything else is done."""
    from ..layout import is_store_dir

    path = cmd.store_path
    if read_only:
        return
    if os.path.exists(path) and not is_store_dir(path) and (not os.path.isdir(path) or os.listdir(path)):
        raise click.UsageError(f"--store {path} is neither a message store nor an empty directory "
                               "(serve creates a store only in a new or empty directory)")
    cmd.refuse_if_locked()


def _check_namesrv_addr(namesrv_addr: str | None) -> None:
    if namesrv_addr:
        from ..broker.outer import split_addresses
        try:
            split_addresses(namesrv_addr)
        except ValueError as e:
            raise click.UsageError(f"--namesrv-addr: {e}") from None


def _http_options(listen: str | None, admin: bool, token: str | None):
    if not listen:
        if admin:
            raise click.UsageError("--http-admin needs --http-listen")
        return None
    from ..broker.broker import parse_listen
    try:
        parse_listen(listen)
    except ValueError as e:
        raise click.UsageError(f"--http-listen: {e}") from None
    try:
        from ..broker.http import HttpOptions
        import aiohttp  # noqa: F401
        import prometheus_client  # noqa: F401
    except ImportError as e:
        raise click.UsageError(f"--http-listen needs the `http` extra (pip install 'rmqstore[http]'): {e}") from None
    if admin and not token:
        raise click.UsageError("--http-admin needs a token: set RMQSTORE_HTTP_TOKEN (or --http-token)")
    return HttpOptions(listen, token if admin else None)


def log_handler() -> logging.Handler:
    if sys.stderr.isatty():  # a terminal: rich's log lines (time, level, message)
        from rich.console import Console
        from rich.logging import RichHandler
        return RichHandler(console=Console(stderr=True), show_path=False)
    return _LineHandler()


def _announce(broker, bcfg, store_path: str, read_only: bool, tls: bool, json_mode: bool) -> None:
    """The listening line (a JSON object with --json)."""
    if json_mode:
        click.echo(json.dumps({"listening": f"{broker.listen_host}:{broker.server_port}",
                               "namesrv_addr": broker.address, "broker_name": bcfg.broker_name,
                               "cluster": bcfg.broker_cluster_name, "store": store_path,
                               "read_only": read_only, "grpc": broker.grpc_address or None,
                               "role": broker.cluster.role, "broker_id": broker.cluster.broker_id,
                               "ha": broker.cluster.ha_addr or None,
                               "namesrv": None if broker.cluster.embedded else broker.cluster.namesrv_addrs,
                               "http": broker.http.address if broker.http else None}))
        return
    if broker.cluster.embedded:
        click.echo(f"listening on {broker.listen_host}:{broker.server_port} (name server and broker "
                   f"{bcfg.broker_name}; clients use namesrvAddr={broker.address}; store {store_path}"
                   f"{', read-only' if read_only else ''})")
    else:
        c = broker.cluster
        click.echo(f"listening on {broker.listen_host}:{broker.server_port} (broker {bcfg.broker_name} id "
                   f"{c.broker_id}, {c.role}, cluster {bcfg.broker_cluster_name}; registered with "
                   f"{';'.join(c.namesrv_addrs)}; store {store_path}{', read-only' if read_only else ''})")
    if broker.grpc_address:
        click.echo(f"gRPC MessagingService on {broker.grpc_address}"
                   f"{' (TLS)' if tls else ''}: RocketMQ 5 clients use endpoints={broker.grpc_address}")
    if broker.cluster.ha_addr:
        click.echo(f"HA (replication) on {broker.cluster.ha_addr}")
    if broker.http:
        click.echo(f"HTTP on {broker.http.address}: metrics at http://{broker.http.address}/metrics, "
                   f"console at http://{broker.http.address}/")


COMMANDS = [serve]
