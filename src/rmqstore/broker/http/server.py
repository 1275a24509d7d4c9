"""The aiohttp application: routes, the bearer-token check on writes, JSON errors, static files."""
from __future__ import annotations

import asyncio
import hmac
import json
import logging
from pathlib import Path

from aiohttp import web
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

from ...errors import RmqStoreError
from . import views
from .history import History
from .metrics import registry_for
from .storage import storage_view
from .writes import Writes

log = logging.getLogger("rmqstore.broker.http")
STATIC = Path(__file__).resolve().parent / "static"


def _json(doc, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(doc, ensure_ascii=False, default=str), status=status,
                        content_type="application/json")


def _int(request: web.Request, name: str, default: int = 0) -> int:
    raw = request.query.get(name, "")
    if raw == "":
        return default
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"query parameter {name}={raw!r} is not an integer") from None


class HttpFront:
    """``/metrics``, ``/api/...`` and the console, on the broker's event loop."""

    def __init__(self, broker, options) -> None:
        from ..server import parse_listen
        self.broker = broker
        self.host, self.port = parse_listen(options.listen)
        self.token = options.admin_token
        self.registry = registry_for(broker)
        self.writes = Writes(broker)
        self.history = History(broker)
        self._history_task: asyncio.Task | None = None
        self.runner: web.AppRunner | None = None
        self.address = ""

    def app(self) -> web.Application:
        app = web.Application(middlewares=[self._errors, self._auth], client_max_size=1 << 20)
        get = [("/metrics", self.metrics), ("/api/broker", self.broker_info), ("/api/topics", self.topics),
               ("/api/topics/{topic}/queues", self.queues), ("/api/groups", self.groups),
               ("/api/groups/{group}", self.group), ("/api/clients", self.clients), ("/api/messages", self.search),
               ("/api/messages/{phy}", self.message), ("/api/storage/{phy}", self.storage),
               ("/api/health", self.health), ("/api/history", self.history_answer), ("/", self.index)]
        for path, fn in get:
            app.router.add_get(path, fn)
        w = self.writes
        app.router.add_post("/api/topics", w.create_topic)
        app.router.add_delete("/api/topics/{topic}", w.delete_topic)
        app.router.add_post("/api/groups/{group}/reset", w.reset_by_time)
        app.router.add_post("/api/messages/{phy}/resend", w.resend_dlq)
        app.router.add_post("/api/health/verify", w.verify)
        app.router.add_static("/static/", STATIC)
        return app

    async def start(self) -> None:
        self.runner = web.AppRunner(self.app(), access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, self.host, self.port, reuse_address=True)
        await site.start()
        self._history_task = asyncio.ensure_future(self.history.run())
        host, port = self.runner.addresses[0][:2]
        self.port = port
        self.address = f"{host}:{port}"
        log.info("HTTP on %s: /metrics, /api/, console at http://%s/ (writes %s)", self.address, self.address,
                 "on (bearer token)" if self.token else "off")

    async def stop(self) -> None:
        if self._history_task is not None:
            self._history_task.cancel()
            self._history_task = None
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    # --- middlewares ----------------------------------------------------------------------------------
    @web.middleware
    async def _errors(self, request: web.Request, handler):
        try:
            return await handler(request)
        except web.HTTPException:
            raise
        except (ValueError, KeyError) as e:
            return _json({"error": str(e)}, 400)
        except RmqStoreError as e:
            return _json({"error": str(e)}, 409)

    @web.middleware
    async def _auth(self, request: web.Request, handler):
        """Writes (any method but GET/HEAD) need ``--http-admin`` and the bearer token: 403 when
        writes are off or the token is wrong, 401 when none was given."""
        if request.method in ("GET", "HEAD", "OPTIONS"):
            return await handler(request)
        if not self.token:
            return _json({"error": "writes are off: start the broker with --http-admin"}, 403)
        given = request.headers.get("Authorization", "")
        if not given.startswith("Bearer "):
            return web.Response(status=401, text='{"error": "Authorization: Bearer <token> required"}',
                                content_type="application/json", headers={"WWW-Authenticate": "Bearer"})
        if not hmac.compare_digest(given[7:].strip().encode(), self.token.encode()):
            return _json({"error": "wrong token"}, 403)
        return await handler(request)

    # --- reads ----------------------------------------------------------------------------------------
    async def metrics(self, request):
        return web.Response(body=generate_latest(self.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def broker_info(self, request):
        doc = views.broker_info(self.broker)
        doc["httpAdmin"] = bool(self.token)
        return _json(doc)

    async def topics(self, request):
        return _json(views.topics(self.broker))

    async def queues(self, request):
        topic = request.match_info["topic"]
        if self.broker.topics.get(topic) is None and topic not in self.broker.store.topics():
            return _json({"error": f"no topic {topic!r}"}, 404)
        return _json(views.queues(self.broker, topic))

    async def groups(self, request):
        return _json(views.groups(self.broker))

    async def group(self, request):
        return _json(views.group_detail(self.broker, request.match_info["group"]))

    async def clients(self, request):
        return _json(views.clients(self.broker))

    async def search(self, request):
        q = dict(request.query, begin=_int(request, "begin"), end=_int(request, "end"))
        return _json(views.search(self.broker, q))

    def _phy(self, request) -> int:
        raw = request.match_info["phy"]
        if not raw.isdigit():
            raise ValueError(f"commit-log offset {raw!r} is not a non-negative integer")
        return int(raw)

    def _at(self, request, fn):
        """``fn(phy)``, or a 404 naming the offset when no record starts there."""
        phy = self._phy(request)
        try:
            doc = fn(phy)
        except (RmqStoreError, ValueError) as e:
            return _json({"error": f"no message at commit-log offset {phy}: {e}"}, 404)
        if doc is None:
            return _json({"error": f"no message at commit-log offset {phy}"}, 404)
        return _json(doc)

    async def message(self, request):
        def one(phy):
            rec = self.broker.store.look_message_by_offset(phy)
            return views.message(rec) if rec is not None else None
        return self._at(request, one)

    async def storage(self, request):
        return self._at(request, lambda phy: storage_view(self.broker.store, phy))

    async def health(self, request):
        return _json(views.health(self.broker, self.writes.last_verify))

    async def history_answer(self, request):
        return _json(self.history.answer(request.query.get("group")))

    async def index(self, request):
        return web.FileResponse(STATIC / "index.html")


__all__ = ["HttpFront"]
