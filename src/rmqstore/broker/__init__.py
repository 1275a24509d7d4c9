"""The broker: RocketMQ's business layer over a :class:`~rmqstore.MessageStore` (``rmqstore serve``).

Layers (each imports only those below it): ``remoting`` (frames and codes) → ``server`` (asyncio
connections) → the processors (``send``, ``pull``, ``admin``, ``transaction``) and services
(``schedule``) over the state managers (``metadata``, ``clients``) → ``broker`` (wiring, lifecycle).
The store never imports this package.
"""
from .broker import Broker
from .config import BrokerConfig

__all__ = ["Broker", "BrokerConfig"]
