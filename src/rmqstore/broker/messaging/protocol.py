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
Code = pb.Code


def status(code: int, message: str | None = None):
    """A ``Status`` with the code's name as its message unless one is given (as the proxy does)."""
    return pb.Status(code=code, message=message if message is not None else pb.Code.Name(code))


OK = status(pb.OK)
