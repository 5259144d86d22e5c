"""Pure-Python domain model of ZooKeeper-mode Kafka metadata (no Spark, no I/O)."""
