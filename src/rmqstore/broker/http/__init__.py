"""The broker's HTTP listener (``rmqstore serve --http-listen``): ``/metrics`` for Prometheus, the
JSON admin API under ``/api/`` and the web console at ``/``. Runs on the broker's own event loop;
needs the ``http`` extra (prometheus-client, aiohttp), imported only when the listener starts."""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class HttpOptions:
    """``listen`` is ``HOST:PORT``; ``admin_token`` turns the write calls on (``Authorization:
    Bearer <token>``); None keeps the API read-only."""

    listen: str
    admin_token: str | None = None


async def start_http(broker, options: HttpOptions):
    """Start the listener; returns the running :class:`~rmqstore.broker.http.server.HttpFront`."""
    from .server import HttpFront
    front = HttpFront(broker, options)
    await front.start()
    return front


__all__ = ["HttpOptions", "start_http"]
