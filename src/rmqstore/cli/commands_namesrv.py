"""``rmqstore namesrv``: a standalone RocketMQ name server (a thin command over
:class:`rmqstore.broker.namesrv.NameServer`)."""
from __future__ import annotations

import asyncio
import json
import logging
import signal
import sys

import click

from .common import debug_option, json_option


@click.command()
@click.option("--listen", default="127.0.0.1:9876", show_default=True, metavar="HOST:PORT",
              help="Address of the name server (brokers' namesrvAddr and clients' namesrvAddr).")
@json_option
@debug_option
def namesrv(listen: str, json_mode: bool) -> None:
    """Run a RocketMQ name server: brokers (rmqstore serve --namesrv-addr, or Java brokers) register
    with it, clients ask it for routes. Keeps no files (routes live while brokers renew them:
    120 s). Stops on SIGINT/SIGTERM (exit 0). With --json the listening line is a JSON object."""
    from ..broker.broker import parse_listen
    from ..broker.namesrv import NameServer
    from .commands_serve import log_handler

    try:
        parse_listen(listen)
    except ValueError as e:
        raise click.UsageError(f"--listen: {e}") from None
    handler = log_handler()
    log = logging.getLogger("rmqstore")
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    ns = NameServer(listen)

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
