"""Subprocess for the crash tests: appends batches 0..N-1 to znode_events, resuming after its last_batch_seq.

usage: python lake_append_loop.py LAKE_ROOT N   (set ZKLEDGER_LAKE_CRASH=<stage>:<seq> to SIGKILL mid-way)
"""

from __future__ import annotations

import sys
from datetime import UTC, datetime

from lakehouse import Lake

WRITER = "loop:test"


def batch_rows(seq: int, per_batch: int = 4) -> list[dict[str, object]]:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    return [
        {"zxid": seq * 100 + i, "path": f"/b{seq}/{i}", "op": "SET", "source": "txnlog", "observed_at": now,
         "event_id": f"{seq}-{i}"}
        for i in range(per_batch)
    ]


def main(argv: list[str]) -> int:
    lake = Lake(argv[0], cluster="crash")
    last = lake.last_batch_seq("znode_events", WRITER)
    for seq in range((-1 if last is None else last) + 1, int(argv[1])):
        lake.append("znode_events", batch_rows(seq), writer_id=WRITER, batch_seq=seq)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
