"""The least a Spark streaming detector can do on this machine, run by `benchmarks.detection_latency --floor`.

    python -m benchmarks.streaming_floor --lake LAKE [--trigger 1]

One Structured Streaming query with the shipped session settings: Delta's streaming source over bronze
``znode_events``, a filter that spots the benchmark's zombie writes without decoding anything else (a partition
state payload with ``"controller_epoch":1``), and one Delta append per micro-batch of their zxids to the table
``floor_hits`` through the connector. No state, no shuffle, one commit: any Spark streaming design that ends in a
Delta row pays at least this, so its detection latency bounds every such design from below.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

FLOOR_TABLE = "floor_hits"
ZOMBIE_MARK = '"controller_epoch":1,'  # simulator.payloads writes compact JSON; epoch 1 is the benchmark's zombie


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m benchmarks.streaming_floor", description=__doc__.splitlines()[0])
    p.add_argument("--lake", required=True, help="the lake whose znode_events the collector fills")
    p.add_argument("--trigger", type=float, default=1.0, help="micro-batch interval in seconds (default 1)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    from pyspark.sql import DataFrame
    from pyspark.sql import functions as F

    from conf.settings import load_settings
    from lakehouse import Lake
    from lakehouse.spark_io import stream_table
    from models.tables import ZNODE_EVENTS
    from services.spark_session import build_spark

    settings = load_settings(lake=args.lake, cluster="bench")
    spark = build_spark(settings, "zkledger-streaming-floor")
    lake = Lake(args.lake, cluster="bench")
    hits = str(Path(args.lake) / FLOOR_TABLE)
    zombies = (stream_table(spark, lake, ZNODE_EVENTS.name)
               .filter(F.col("path").endswith("/state") & F.col("data").cast("string").contains(ZOMBIE_MARK))
               .select("zxid"))

    def append(batch: DataFrame, batch_id: int) -> None:
        (batch.write.format("delta").mode("append").option("txnAppId", "streaming-floor")
         .option("txnVersion", str(batch_id)).save(hits))

    query = (zombies.writeStream.foreachBatch(append).option("checkpointLocation", str(Path(args.lake) / "_floor_ck"))
             .trigger(processingTime=f"{args.trigger} seconds").start())
    try:
        query.awaitTermination()
    except KeyboardInterrupt:
        query.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
