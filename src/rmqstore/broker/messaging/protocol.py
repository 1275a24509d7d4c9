"""The ``apache.rocketmq.v2`` messages and service, compiled from the vendored ``.proto`` files.

``grpc.protos_and_services`` (grpcio-tools) compiles ``proto/apache/rocketmq/v2/service.proto`` in
memory on first import; no generated code is kept in the tree (see ``proto/README.md`` for the
version). ``pb`` holds the message classes and enum values of both files (``pb.SendMessageRequest``, ``pb.Code``, ...), ``services``
the servicer base class and ``add_MessagingServiceServicer_to_server``, ``stub`` the client stub.
"""
from __future__ import annotations

import os
import sys
import threading
import types

_PROTO_ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "proto")
_lock = threading.Lock()


def _load():
    import grpc  # noqa: F401 - grpcio-tools needs grpc imported first

    with _lock:
        sys.path.insert(0, _PROTO_ROOT)
        try:
            messages, servicers = grpc.protos_and_services("apache/rocketmq/v2/service.proto")
            definitions = sys.modules["apache.rocketmq.v2.definition_pb2"]
        finally:
            sys.path.remove(_PROTO_ROOT)
    namespace = types.SimpleNamespace()
    for module in (definitions, messages):
        for name in dir(module):
            if not name.startswith("_"):
                setattr(namespace, name, getattr(module, name))
    return namespace, servicers


pb, services = _load()

SERVICE_NAME = "apache.rocketmq.v2.MessagingService"
#: the service's descriptor: its methods, their request/response types and streaming kinds
SERVICE = sys.modules["apache.rocketmq.v2.service_pb2"].DESCRIPTOR.services_by_name["MessagingService"]
Code = pb.Code


def status(code: int, message: str | None = None):
    """A ``Status`` with the code's name as its message unless one is given (as the proxy does)."""
    return pb.Status(code=code, message=message if message is not None else pb.Code.Name(code))


OK = status(pb.OK)


def generic_handler(servicer):
    """The service's handler for ``grpc.aio`` with request parsing inside the handler, so that a request
    that is not a valid protobuf is answered INVALID_ARGUMENT naming the type expected (grpcio's own
    parsing answers UNKNOWN with the parser's exception)."""
    import grpc
    from google.protobuf.message import DecodeError

    def parse(cls, raw: bytes):
        try:
            return cls.FromString(raw)
        except DecodeError as e:
            raise _BadRequest(f"request is not a valid {cls.DESCRIPTOR.full_name}: {e}") from None

    handlers = {}
    for method in SERVICE.methods:
        req_cls = getattr(pb, method.input_type.name)
        resp_cls = getattr(pb, method.output_type.name)
        impl = getattr(servicer, method.name)
        serialize = resp_cls.SerializeToString
        if method.client_streaming and method.server_streaming:
            async def bidi(requests, context, impl=impl, req_cls=req_cls):
                async def parsed():
                    async for raw in requests:
                        try:
                            yield parse(req_cls, raw)
                        except _BadRequest as e:
                            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
                await impl(parsed(), context)

            handlers[method.name] = grpc.stream_stream_rpc_method_handler(bidi, response_serializer=serialize)
        elif method.server_streaming:
            async def server_stream(raw, context, impl=impl, req_cls=req_cls):
                try:
                    request = parse(req_cls, raw)
                except _BadRequest as e:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
                async for item in impl(request, context):
                    yield item

            handlers[method.name] = grpc.unary_stream_rpc_method_handler(server_stream, response_serializer=serialize)
        else:
            async def unary(raw, context, impl=impl, req_cls=req_cls):
                try:
                    request = parse(req_cls, raw)
                except _BadRequest as e:
                    await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))
                return await impl(request, context)

            handlers[method.name] = grpc.unary_unary_rpc_method_handler(unary, response_serializer=serialize)
    return grpc.method_handlers_generic_handler(SERVICE.full_name, handlers)


class _BadRequest(Exception):
    pass
