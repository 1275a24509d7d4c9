"""``rmqstore namesrv``: a standalone RocketMQ name server (a thin command over
:class:`rmqstore.broker.namesrv.NameServer`)."""
from __future__ import annotations

import asyncio
import json
import logging
import os
import signal
import sys

import click

from .common import debug_option, json_option


@click.command()
@click.option("--listen", default="127.0.0.1:9876", show_default=True, metavar="HOST:PORT",
              help="Address of the name server (brokers' namesrvAddr and clients' namesrvAddr).")
@click.option("--kv-config", "kv_config", default=None, metavar="FILE",
              help="Keep the KV config (mqadmin updateKvConfig, the order-topic config) in FILE, RocketMQ's "
                   "kvConfig.json format: loaded at start, written after each change (the previous file kept "
                   "as FILE.bak). Default: in memory only.")
@json_option
@debug_option
def namesrv(listen: str, kv_config: str | None, json_mode: bool) -> None:
    """Run a RocketMQ name server: brokers (rmqstore serve --namesrv-addr, or Java brokers) register
    with it, clients ask it for routes. Keeps no files but --kv-config's (routes live while brokers
    renew them: 120 s). Stops on SIGINT/SIGTERM (exit 0). With --json the listening line is a JSON
    object."""
    from ..broker.broker import parse_listen
    from ..broker.namesrv import NameServer
    from ..errors import CorruptRecordError
    from .commands_serve import log_handler

    try:
        parse_listen(listen)
    except ValueError as e:
        raise click.UsageError(f"--listen: {e}") from None
    if kv_config is not None and os.path.isdir(kv_config):
        raise click.UsageError(f"--kv-config: {kv_config} is a directory; give the path of a file")
    try:
        ns = NameServer(listen, kv_config_path=kv_config)
    except CorruptRecordError as e:
        raise click.UsageError(f"--kv-config: {e}; fix or move the file (nothing was written to it)") from None
    except OSError as e:
        raise click.UsageError(f"--kv-config: cannot read {kv_config}: {e.strerror or e}") from None
    handler = log_handler()
    log = logging.getLogger("rmqstore")
    log.addHandler(handler)
    log.setLevel(logging.INFO)

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, ns.request_stop)
        await ns.start_async()
        if json_mode:
            click.echo(json.dumps({"listening": ns.address, "namesrv_addr": ns.address}))
        else:
            click.echo(f"name server listening on {ns.address} (brokers and clients use namesrvAddr={ns.address})")
        sys.stdout.flush()
        await ns.wait_stopped()
        await ns.stop_async()

    try:
        asyncio.run(main())
    except OSError as e:
        raise click.ClickException(f"cannot listen on {listen}: {e.strerror or e}") from None
    finally:
        log.removeHandler(handler)
    click.echo("stopped", err=True)


COMMANDS = [namesrv]
