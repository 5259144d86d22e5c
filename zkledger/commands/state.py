"""`zkledger state`: the cluster's metadata as of a point in time, a zxid (ZooKeeper) or an offset (KRaft's metadata
log) (time travel over the lake)."""

from __future__ import annotations

import argparse
import json
from datetime import datetime
from typing import Any

from models.tables import KRAFT_RECORDS, PARTITION_TRANSITIONS, ZNODE_EVENTS
from services.errors import UserError
from services.sanitize import terminal_safe
from zkledger.context import Context


def parse_zxid(text: str) -> int:
    """A zxid as decimal or 0x-prefixed hex (ZooKeeper's own logs print hex)."""
    try:
        value = int(text, 0) if text.lower().startswith("0x") else int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a zxid (decimal or 0x hex): {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"a zxid is not negative: {text!r}")
    return value


def parse_offset(text: str) -> int:
    """A metadata log offset: a decimal, not negative."""
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"not a log offset (a decimal >= 0): {text!r}")
    return int(text)


def register(subparsers: Any) -> None:
    parser = subparsers.add_parser("state", help="the cluster's metadata as of a point in time",
                                   description="Controller and epoch, live brokers, and per partition "
                                               "leader/ISR/replicas/state as of --at TIME, --zxid N (a ZooKeeper "
                                               "cluster) or --offset N (a KRaft cluster's metadata log). A cluster "
                                               "migrating from ZooKeeper to KRaft (its txnlog and metadata log "
                                               "both collected) is answered at --at TIME from the bronze tables "
                                               "by the store that holds its metadata then: ZooKeeper before the "
                                               "migration, KRaft once finalized, both in between.")
    point = parser.add_mutually_exclusive_group(required=True)
    point.add_argument("--at", metavar="TIME", default=None, help="ISO 8601 time (naive = UTC)")
    point.add_argument("--zxid", metavar="N", type=parse_zxid, default=None,
                       help="ZooKeeper transaction id, decimal or hex (0x40)")
    point.add_argument("--offset", metavar="N", type=parse_offset, default=None,
                       help="a KRaft cluster's metadata log offset (where its history has the zxid)")
    parser.add_argument("--topic", metavar="T", default=None, help="only this topic")
    parser.add_argument("--format", choices=("table", "json"), default="table", help="output format")
    parser.set_defaults(handler=run)


def run(args: argparse.Namespace, ctx: Context) -> str:
    from pipelines.time_travel import state_at
    from services import metadata_events
    from zkledger.commands.anomalies import parse_time

    at = parse_time(args.at) if args.at else None
    if at is not None and (answered := _migration_state(args, ctx, at)) is not None:
        return answered
    ctx.require_lake()
    if not metadata_events.exists(ctx.lake):
        raise UserError(f"no metadata events under {ctx.lake_root}: collect a cluster's history "
                        "(`zkledger collect ...`), then run `zkledger rebuild`")
    pt = PARTITION_TRANSITIONS.name
    transitions = ctx.lake.read_arrow(pt).to_pylist() if ctx.lake.exists(pt) else []
    position = args.zxid if args.offset is None else args.offset  # a KRaft history keeps the offset as its zxid
    st = state_at(metadata_events.read(ctx.lake).to_pylist(), transitions, zxid=position, at=at,
                  topic=args.topic)
    if args.format == "json":
        print(json.dumps(st, default=str, sort_keys=True))
    else:
        print(f"controller: {st['controller_id']}  epoch: {st['controller_epoch']}  live brokers: {st['live_brokers']}")
        print(f"{'topic':<24} {'part':>4} {'state':<22} {'leader':>6} {'epoch':>5}  isr / replicas")
        for p in st["partitions"]:
            print(f"{terminal_safe(p['topic']):<24} {p['partition']:>4} {p['state'] or '-':<22} {p['leader']!s:>6} "
                  f"{p['leader_epoch']!s:>5}  {p['isr']} / {p['replicas']}")
    point = (f"zxid {args.zxid}" if args.zxid is not None else f"offset {args.offset}" if args.offset is not None
             else f"{at}")
    return f"{len(st['partitions'])} partitions as of {point}"


def _migration_state(args: argparse.Namespace, ctx: Context, at: datetime) -> str | None:
    """A cluster that migrates from ZooKeeper to KRaft (both bronze histories in the lake) is answered from the
    store(s) that hold its metadata at ``at`` (``models.migration_state``), with no rebuild; None otherwise."""
    import pyarrow.compute as pc

    from models.migration_state import ANSWERING, is_migration, migration_state_at
    from pipelines.migration_check import migration_history

    ctx.require_lake()
    if not (ctx.lake.exists(ZNODE_EVENTS.name) and ctx.lake.exists(KRAFT_RECORDS.name)):
        return None
    zk = ctx.lake.read_arrow(ZNODE_EVENTS.name)
    kraft = ctx.lake.read_arrow(KRAFT_RECORDS.name)
    zk, kraft = zk.filter(pc.equal(zk["cluster"], ctx.cluster)), kraft.filter(pc.equal(kraft["cluster"], ctx.cluster))
    if zk.num_rows == 0 or kraft.num_rows == 0:
        return None
    history = migration_history(zk, kraft).history
    if not is_migration(history):
        return None
    st = migration_state_at(history, at)
    stores: dict[str, dict[str, Any]] = {}
    for store, view in st.views.items():
        parts = [{"topic": t, "partition": p, "leader": f.leader, "leader_epoch": f.leader_epoch,
                  "isr": list(f.isr), "replicas": list(f.replicas)}
                 for (t, p), f in sorted(view.partitions.items()) if args.topic in (None, t)]
        stores[str(store)] = {"position": view.position, "brokers": sorted(view.brokers), "partitions": parts}
    if args.format == "json":
        print(json.dumps({"at": at, "phase": str(st.phase), "stores": stores}, default=str, sort_keys=True))
    else:
        print(f"migration phase: {st.phase}; answered by {' and '.join(str(s) for s in ANSWERING[st.phase])}")
        for name, body in stores.items():
            where = f"zxid {body['position']:#x}" if name == "zookeeper" else f"offset {body['position']}"
            print(f"{name} at {where}: brokers {body['brokers']}")
            print(f"  {'topic':<24} {'part':>4} {'leader':>6} {'epoch':>5}  isr / replicas")
            for p in body["partitions"]:
                print(f"  {terminal_safe(p['topic']):<24} {p['partition']:>4} {p['leader']!s:>6} "
                      f"{p['leader_epoch']!s:>5}  {p['isr']} / {p['replicas']}")
    counts = ", ".join(f"{len(body['partitions'])} partitions in {name}" for name, body in stores.items())
    return f"{counts} as of {at} (migration phase {st.phase})"
