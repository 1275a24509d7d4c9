"""Replication: RocketMQ's classic HA protocol (docs/ha-protocol.md). :class:`HAService` is what a
store owns (``MessageStore.start_ha``); :mod:`.protocol` the wire frames, :mod:`.master` and
:mod:`.slave` the two sides, :mod:`.replica` the slave's writes."""
from __future__ import annotations

from .protocol import HEADER_SIZE, REPORT_SIZE, FrameReader, ReportReader, encode_header, encode_report, start_offset
from .service import SLAVE, SYNC_MASTER, HAService

__all__ = ["HAService", "SLAVE", "SYNC_MASTER", "HEADER_SIZE", "REPORT_SIZE", "FrameReader", "ReportReader",
           "encode_header", "encode_report", "start_offset"]
