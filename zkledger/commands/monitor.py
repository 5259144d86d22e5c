"""`zkledger monitor`: the pipeline's Spark query on its checkpoint, a micro-batch per trigger."""

from __future__ import annotations

import argparse
import signal
import threading
import time
from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from services.metrics import Metrics, add_metrics_argument, metrics_server
from zkledger.context import Context

if TYPE_CHECKING:
    from lakehouse import Lake
    from lakehouse.files import StagedFiles


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "monitor", help="run the pipeline as Spark Structured Streaming queries with checkpoints",
        description="Stream znode_events and controller_decisions through the same query as `rebuild`, "
                    "printing each new anomaly as one line when its micro-batch commits. It continues on the "
                    "checkpoint `rebuild` left (or its own), where the last run ended.")
    parser.add_argument("--trigger", metavar="SECONDS", type=float, default=None,
                        help="micro-batch interval (default: [streaming] trigger_seconds in the settings, 1 s)")
    parser.add_argument("--available-now", action="store_true", help="process what is there, then stop")
    parser.add_argument("--webhook", metavar="URL", default=None,
                        help="also POST each new anomaly as JSON to URL (retried, never blocks the stream; "
                             "default: settings monitor.webhook)")
    parser.add_argument("--quality", action="store_true",
                        help="run the quality suites on each micro-batch (default: settings monitor.quality_each_batch)")
    parser.add_argument("--maintain-every", metavar="HOURS", type=float, default=None,
                        help="run `zkledger maintain` between micro-batches this often "
                             "(default: settings monitor.maintain_every_hours; 0 = off)")
    add_metrics_argument(parser)
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    from engine.monitor import start_monitor
    from engine.stateful import stateful_checkpoint
    from lakehouse.files import StagedFiles
    from services.alerts import AnomalyAlerter
    from services.errors import UserError

    url = args.webhook or ctx.settings.monitor.webhook or None
    quality = args.quality or ctx.settings.monitor.quality_each_batch
    trigger = args.trigger if args.trigger is not None else ctx.settings.streaming.trigger_seconds
    maintain_hours = args.maintain_every if args.maintain_every is not None else ctx.settings.monitor.maintain_every_hours
    if maintain_hours < 0:
        raise UserError("--maintain-every must be >= 0 hours")
    with metrics_server("monitor", args.metrics_port, ctx.settings) as metrics:
        try:
            alerter = AnomalyAlerter(url, on_delivery=None if metrics is None else metrics.webhook_result)
        except ValueError as exc:
            raise UserError(str(exc)) from exc
        publish = alerter.publish if metrics is None else _counted(alerter.publish, metrics)
        spark = ctx.spark("zkledger-monitor")
        table_commit_s = ctx.settings.monitor.table_commit_seconds
        checkpoint = stateful_checkpoint(ctx.settings.streaming.checkpoint_root, ctx.lake_root)
        watch = None if metrics is None else LakeWatch(ctx.lake, metrics, table_commit_s,  # baseline: before the query
                                                       StagedFiles(checkpoint))
        runs: list[Any] = []  # the query's runs: another after a run that could not start its first micro-batch

        def start() -> Any:
            query = start_monitor(spark, ctx.lake, checkpoint,
                                  trigger_seconds=trigger, available_now=args.available_now,
                                  buckets=ctx.settings.pipeline.buckets, publish=publish, quality=quality,
                                  max_files_per_trigger=ctx.settings.streaming.max_files_per_trigger,
                                  maintain_every_s=3600 * maintain_hours,
                                  offline_blip=timedelta(milliseconds=ctx.settings.pipeline.offline_blip_ms),
                                  table_commit_s=table_commit_s)
            if watch is not None:
                watch.listen(spark, query)
            runs.append(query)
            return query

        _until_stopped(start, runs, alerter, watch)
    if args.available_now:
        return f"monitor caught up and stopped: {alerter.count} anomalies published"
    return f"monitor stopped: {alerter.count} anomalies published"


def _until_stopped(start: Callable[[], Any], runs: list[Any], alerter: Any, watch: LakeWatch | None = None) -> None:
    """Start the streaming query and wait for it (Ctrl-C stops it; `run_stateful_query` starts it again if its
    first micro-batch could not start), commit what it staged, then let the alerter deliver what it holds. With
    metrics, the wait turns every second: the loop /healthz watches, and the lake read after each micro-batch.
    ``runs``: the runs ``start`` made, the last one current."""
    from engine.monitor import stop_monitor
    from engine.stateful import run_stateful_query

    def wait(query: Any) -> None:
        if watch is None:
            query.awaitTermination()
            return
        while not query.awaitTermination(1):
            watch.turn(query)
        watch.turn(query)

    previous = signal.signal(signal.SIGTERM, _interrupt)  # a service manager's stop ends it as Ctrl-C does
    try:
        run_stateful_query(start, wait)
    except KeyboardInterrupt:
        pass
    finally:
        signal.signal(signal.SIGTERM, previous)
        if runs:
            stop_monitor(runs[-1])  # commits what the last micro-batches staged
        alerter.close()


def _interrupt(*_: Any) -> None:
    raise KeyboardInterrupt


def _counted(publish: Callable[[list[dict[str, Any]]], object],
             metrics: Metrics) -> Callable[[list[dict[str, Any]]], object]:
    """``publish``, counting each batch's new anomalies by kind and severity first."""

    def counted(rows: list[dict[str, Any]]) -> object:
        metrics.anomalies(rows)
        return publish(rows)

    return counted


BRONZE = ("znode_events", "controller_decisions")


NEWEST_COLUMN = "max.event_time"
"""A data file's newest ``event_time``, in the Delta log's statistics."""


class LakeWatch:
    """The monitor's metrics from Spark's progress events and from the lake its micro-batches commit to.

    A listener on the session takes each progress event of the query (duration, rows read per bronze table)
    and marks the lake as changed; the command's wait loop then reads the derived tables' Delta logs (no data):
    the rows of the files added since the last look, by table, and the newest ``event_time`` among them
    (the transitions', the states'); once more ``table_commit_s`` after the last micro-batch, when the tables it staged have
    been committed. The files present at start are the baseline, not counted."""

    def __init__(self, lake: Lake, metrics: Metrics, table_commit_s: float = 0.0,
                 staged: StagedFiles | None = None) -> None:
        self.lake, self.metrics, self.table_commit_s, self.staged = lake, metrics, table_commit_s, staged
        self.files: dict[str, set[str]] = {}
        self.changed = threading.Event()
        self.look_again_at: float | None = None
        self.query_id: str | None = None
        self.listening = False
        self._read(count=False)

    def listen(self, spark: Any, query: Any) -> None:
        from engine.query_events import JsonQueryListener

        watch = self
        self.query_id = str(query.id)  # a run started again from the checkpoint keeps the query's id
        self.metrics.source_connected(bool(query.isActive))
        if self.listening:
            return
        self.listening = True

        class Listener(JsonQueryListener):
            def onQueryProgress(self, event: Any) -> None:
                watch.progressed(event.progress)

            def onQueryIdle(self, event: Any) -> None:
                if str(event.id) == watch.query_id:
                    watch.metrics.loop_turned(idle=True)

            def onQueryTerminated(self, event: Any) -> None:
                if str(event.id) == watch.query_id:
                    watch.metrics.source_connected(False)

        spark.streams.addListener(Listener())

    def progressed(self, progress: Any) -> None:
        """A progress event: a finished micro-batch (rows read), or a report that there was nothing to read."""
        if str(progress.id) != self.query_id:
            return
        if progress.numInputRows > 0:
            rows: dict[str, int] = {}
            for source in progress.sources:
                table = next((t for t in BRONZE if t in str(source.description)), "other")
                rows[table] = rows.get(table, 0) + int(source.numInputRows)
            self.metrics.batch_done(progress.durationMs.get("triggerExecution", 0) / 1000, rows)
            self.changed.set()
        else:
            self.metrics.loop_turned(idle=True)

    def turn(self, query: Any) -> None:
        """One turn of the command's wait loop."""
        self.metrics.source_connected(bool(query.isActive))
        self.metrics.loop_turned()
        if self.staged is not None:
            self.metrics.staged(self.staged.oldest_age_s())
        if self.changed.is_set():
            self.changed.clear()
            self._read(count=True)
            self.look_again_at = time.monotonic() + self.table_commit_s + 1 if self.table_commit_s else None
        elif self.look_again_at is not None and time.monotonic() >= self.look_again_at:
            self.look_again_at = None
            self._read(count=True)

    def _read(self, count: bool) -> None:
        import pyarrow as pa

        from models.tables import DERIVED_TABLES

        newest: list[Any] = []
        written: dict[str, int] = {}
        for spec in DERIVED_TABLES:
            if not self.lake.exists(spec.name):
                continue
            actions = pa.table(self.lake.snapshot(spec.name).get_add_actions(flatten=True))
            paths = actions.column("path").to_pylist()
            known = self.files.get(spec.name, set())
            if count:
                written[spec.name] = sum(n or 0 for path, n in zip(paths, actions.column("num_records").to_pylist(),
                                                                   strict=True) if path not in known)
            self.files[spec.name] = set(paths)
            if NEWEST_COLUMN in actions.column_names:
                newest += [t for t in actions.column(NEWEST_COLUMN).to_pylist() if t is not None]
        # the newest event time first: a scrape that sees the new rows' counts sees their time too
        if newest:
            self.metrics.monitor_committed(max(newest))
        for table, new in written.items():
            if new:
                self.metrics.rows_written(table, new)
