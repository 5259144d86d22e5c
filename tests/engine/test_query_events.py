"""`engine.query_events.JsonQueryListener` hands a listener the same events PySpark's own bridge does: a real
streaming query over a Delta table, its progress as the listener received it against the query's own record."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from engine.query_events import JsonQueryListener


class Recorder(JsonQueryListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, Any]] = []
        self.terminated = threading.Event()

    def onQueryStarted(self, event: Any) -> None:
        self.events.append(("started", event))

    def onQueryProgress(self, event: Any) -> None:
        self.events.append(("progress", event.progress))

    def onQueryTerminated(self, event: Any) -> None:
        self.events.append(("terminated", event))
        self.terminated.set()


def test_the_listener_receives_the_querys_own_progress(spark: Any, tmp_path: Path) -> None:
    path = str(tmp_path / "table")
    for start in (0, 5):  # two commits: with one file per trigger, two micro-batches
        spark.range(start, start + 5).coalesce(1).write.format("delta").mode("append").save(path)
    recorder = Recorder()
    spark.streams.addListener(recorder)
    try:
        query = (spark.readStream.format("delta").option("maxFilesPerTrigger", 1).load(path).writeStream
                 .format("noop").option("checkpointLocation", str(tmp_path / "checkpoint"))
                 .trigger(availableNow=True).start())
        query.awaitTermination()
        assert recorder.terminated.wait(60), "no termination event"
    finally:
        spark.streams.removeListener(recorder)

    kinds = [kind for kind, _ in recorder.events]
    assert kinds[0] == "started" and kinds[-1] == "terminated" and kinds.count("progress") == 2
    assert {str(event.id) for kind, event in recorder.events if kind != "progress"} == {str(query.id)}
    received = [p for kind, p in recorder.events if kind == "progress"]
    own = query.recentProgress  # PySpark's bridge, field by field from the JVM objects
    assert [json.loads(p.json) for p in received] == [json.loads(p.json) for p in own]
    assert [(p.batchId, p.numInputRows, p.sources[0].numInputRows) for p in received] == [(0, 5, 5), (1, 5, 5)]
    assert "triggerExecution" in received[0].durationMs and "delta" in received[0].sources[0].description.lower()
