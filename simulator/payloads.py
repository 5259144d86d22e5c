"""Znode payload bytes exactly as Kafka of a given version writes them (docs/kafka-metadata.md).

The simulator writes through the project's one codec, `models.znode_codec`: the bytes the simulated cluster
writes and the bytes the pipeline decodes come from the same rules.
"""

from __future__ import annotations

from models.znode_codec import (
    encode_broker_registration,
    encode_controller,
    encode_controller_epoch,
    encode_isr_change,
    encode_partition_state,
    encode_topic_assignment,
)

__all__ = [
    "encode_broker_registration",
    "encode_controller",
    "encode_controller_epoch",
    "encode_isr_change",
    "encode_partition_state",
    "encode_topic_assignment",
]
