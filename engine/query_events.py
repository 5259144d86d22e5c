"""A streaming-query listener whose events cross from the JVM as one JSON string each.

PySpark's own listener bridge builds each event on the Python side from the JVM object, one py4j call per field.
Every Java map of a progress (its durations, each source's and the sink's metrics, each state operator's custom
metrics) is iterated until the JVM throws ``NoSuchElementException``, and PySpark inspects each such exception
with a dozen class lookups across the driver's classpath. A progress event cost about a tenth of a CPU-second that
way, on every micro-batch of every monitor (``benchmarks/query_listener.py``). Here the JVM serialises the event
(``json()``, what Spark Connect sends) and PySpark's ``fromJson`` builds the same event classes from it.
"""

from __future__ import annotations

import json
from typing import Any, ClassVar

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

JAVA_LISTENER = "org.apache.spark.sql.streaming.PythonStreamingQueryListener"
"""The Java interface Spark's wrapper (``PythonStreamingQueryListenerWrapper``) calls a Python listener through."""


class JsonEventBridge:
    """The Python side of ``JAVA_LISTENER`` (py4j): each event as its JSON, one call to the JVM."""

    def __init__(self, listener: StreamingQueryListener) -> None:
        self.listener = listener

    def onQueryStarted(self, jevent: Any) -> None:
        self.listener.onQueryStarted(QueryStartedEvent.fromJson(json.loads(jevent.json())))

    def onQueryProgress(self, jevent: Any) -> None:
        self.listener.onQueryProgress(QueryProgressEvent.fromJson(json.loads(jevent.json())))

    def onQueryIdle(self, jevent: Any) -> None:
        self.listener.onQueryIdle(QueryIdleEvent.fromJson(json.loads(jevent.json())))

    def onQueryTerminated(self, jevent: Any) -> None:
        self.listener.onQueryTerminated(QueryTerminatedEvent.fromJson(json.loads(jevent.json())))

    class Java:
        implements: ClassVar[list[str]] = [JAVA_LISTENER]


class JsonQueryListener(StreamingQueryListener):
    """A ``StreamingQueryListener`` (register it with ``spark.streams.addListener``) that receives PySpark's event
    classes built by `JsonEventBridge`. Subclasses override the ``on*`` methods they need; the rest do nothing."""

    @property
    def _jlistener(self) -> Any:  # what ``StreamingQueryManager.addListener`` hands the JVM
        from pyspark import SparkContext

        if not hasattr(self, "_bridge"):
            jvm: Any = SparkContext._jvm
            self._bridge = jvm.PythonStreamingQueryListenerWrapper(JsonEventBridge(self))
        return self._bridge

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        pass

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        pass
