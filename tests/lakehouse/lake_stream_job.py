"""Subprocess for the streaming crash test: znode_events of one lake streamed into another, drained (availableNow).

usage: python lake_stream_job.py SRC_ROOT SINK_ROOT CHECKPOINT
(set ZKLEDGER_LAKE_CRASH=<stage>:<batch_id> to SIGKILL the driver in the middle of a micro-batch)
"""

from __future__ import annotations

import sys

from pyspark.sql import DataFrame
from pyspark.sql.streaming import StreamingQuery

from conf.settings import load_settings
from lakehouse import Lake
from lakehouse.spark_io import stream_table
from services.spark_session import build_spark

WRITER = "stream:test"


def main(argv: list[str]) -> int:
    src, sink = Lake(argv[0], cluster="s"), Lake(argv[1], cluster="s")
    spark = build_spark(load_settings(overrides={"spark.master": "local[1]"}), app_name="lake-stream-job")

    def sink_batch(df: DataFrame, batch_id: int) -> None:
        sink.append("znode_events", df.toArrow(), writer_id=WRITER, batch_seq=batch_id)

    query: StreamingQuery = (
        stream_table(spark, src, "znode_events")
        .writeStream.foreachBatch(sink_batch)
        .option("checkpointLocation", argv[2])
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
