"""The keyed fold of both state machines over a batch's events, seeded with each touched key's carried row:
the rows of whole keys in fold order, in runs folded by ``pipelines.vector_fold`` one thread per core."""

from __future__ import annotations

from itertools import pairwise
from typing import Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.pandas.types import to_arrow_schema

from pipelines.fold_records import FOLD_ARROW_SCHEMA, FOLD_INPUT, FOLD_ORDER, FOLD_RECORDS
from pipelines.parallel import concat_or_empty, parallel_map
from pipelines.state_machines import PARTITION_TYPES, SEED, GlobalContext
from pipelines.vector_fold import fold_parts, int_codes


def _key_codes(*tables: pa.Table) -> list[pa.Array]:
    """(topic, partition) of each table's rows as one int64 per row, equal for equal keys across ``tables``.

    For membership tests (Arrow joins refuse list columns): a topic code and the partition packed in an int,
    not a "topic|partition" string built per row.
    """
    topics = pa.chunked_array([c for t in tables for c in t["topic"].cast(pa.string()).chunks], pa.string())
    code = pc.fill_null(pc.dictionary_encode(topics.combine_chunks()).indices, -1).to_numpy(
        zero_copy_only=False).astype(np.int64)  # one hash pass over every table's topics; a null is -1
    part = np.concatenate([pc.fill_null(t["partition"], -1).to_numpy(zero_copy_only=False).astype(np.int64)
                           for t in tables]) if tables else np.zeros(0, np.int64)
    packed = (code << 32) | (part & 0xFFFF_FFFF)
    bounds = np.cumsum([t.num_rows for t in tables])[:-1]
    return [pa.array(k, pa.int64()) for k in np.split(packed, bounds)]


def fold_local(meta_t: pa.Table, fanned: pa.Table, seeds_t: tuple[pa.Table, pa.Table], ctx: GlobalContext,
               kafka_version: str) -> dict[str, pa.Table]:
    """The fold of one key bucket's batch: the records by kind (``vector_fold.FOLD_RECORDS``). ``fanned``:
    ``fanout.fanout_rows`` of the batch."""
    carried_ps, carried_rs = seeds_t
    schema = to_arrow_schema(FOLD_INPUT)
    keyed = meta_t.filter(pc.and_(pc.is_in(meta_t["type"], pa.array(PARTITION_TYPES)), pc.is_valid(meta_t["partition"])))
    events = pa.concat_tables([_conform(keyed, schema, ord=1), _conform(fanned, schema, ord=1)])
    reps = carried_rs.sort_by([("topic", "ascending"), ("partition", "ascending"), ("replica", "ascending"),
                               ("state", "ascending")])
    grouped = reps.group_by(["topic", "partition"], use_threads=False).aggregate([("replica", "list"), ("state", "list")])
    event_keys, carried_keys, grouped_keys = _key_codes(events, carried_ps, grouped)
    is_seed = pc.is_in(carried_keys, pc.unique(event_keys))
    seeds = carried_ps.filter(is_seed)
    at = pc.index_in(carried_keys.filter(is_seed), grouped_keys)
    seed_rows = _conform(seeds.rename_columns(["zxid" if c == "as_of_zxid" else c for c in seeds.column_names]), schema,
                         ord=0, type=SEED, event_id="", _seq=0,
                         seed_replica_ids=pc.take(grouped["replica_list"], at),
                         seed_replica_states=pc.take(grouped["state_list"], at))
    rows = pa.concat_tables([events, seed_rows])
    order, key = _fold_order(rows)
    rows = rows.take(pa.array(order, pa.int64()))  # one gather: the fold then reads runs of adjacent rows
    # keys are independent: fold runs of whole keys on every core (numpy and Arrow release the GIL), as
    # Spark folds buckets; smaller runs also stay in cache
    key_starts = np.nonzero(np.concatenate([[True], key[1:] != key[:-1]]))[0]
    cuts = _cuts(key_starts, rows.num_rows, LOCAL_FOLD_CHUNK_ROWS)
    runs = [rows.slice(a, b - a) for a, b in pairwise(cuts)]
    folded = parallel_map(lambda run: fold_parts(run, ctx, kafka_version), runs)
    return {rec: concat_or_empty([f[rec] for f in folded], FOLD_ARROW_SCHEMA) for rec in FOLD_RECORDS}


LOCAL_FOLD_CHUNK_ROWS = 250_000


def _fold_order(rows: pa.Table) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """(row order of the fold: by key, then FOLD_ORDER; each ordered row's key code).

    Keys need only be contiguous (each is folded alone), so a key is one int: the topic's code (first
    appearance, not collation) and the partition. event_id, a string, only breaks ties, which are rare: then
    Arrow sorts everything.
    """
    key = _key_codes(rows)[0].to_numpy()
    rest = [int_codes(rows[c]) for c in FOLD_ORDER[2:-1]]  # ord, zxid, _seq
    order = np.lexsort([*rest[::-1], key])
    ordered = [key[order], *(c[order] for c in rest)]
    tie = np.ones(max(len(order) - 1, 0), bool)
    for c in ordered:
        tie &= c[1:] == c[:-1]
    if tie.any():
        order = pc.sort_indices(rows, [(c, "ascending", "at_start") for c in FOLD_ORDER]).to_numpy()
    return order, key[order]


def _cuts(key_starts: npt.NDArray[np.int64], n: int, chunk_rows: int) -> list[int]:
    """Row offsets splitting ``n`` sorted rows into runs of about ``chunk_rows``, each cut at a key's first row."""
    wanted = np.arange(chunk_rows, n, chunk_rows)
    at = np.searchsorted(key_starts, wanted)
    inner = np.unique(key_starts[at[at < len(key_starts)]])
    return [0, *(int(c) for c in inner if 0 < c < n), n]


def _conform(t: pa.Table, schema: pa.Schema, **values: Any) -> pa.Table:
    """``t`` with ``schema``'s columns: a value given here (constant or array), else its own column, else nulls."""
    n = t.num_rows
    cols = []
    for f in schema:
        v = values.get(f.name)
        if v is None:
            cols.append(t[f.name].cast(f.type) if f.name in t.column_names else pa.nulls(n, f.type))
        elif isinstance(v, (pa.Array, pa.ChunkedArray)):
            cols.append(v.cast(f.type))
        else:
            cols.append(pa.array([v] * n, f.type))
    return pa.Table.from_arrays(cols, schema=schema)
