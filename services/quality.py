"""Run the models.quality suites with Great Expectations 1.x on Spark DataFrames.

Two entry points:

* :func:`run_quality` validates the current snapshot of every table in a lake, appends one row per
  expectation result to ``quality_results`` and writes a static HTML page of the run under
  ``<lake>/_quality/``.
* :func:`run_quality_on_batch` validates DataFrames you already hold (the monitor's ``foreachBatch``);
  it writes nothing.

GX chain: context -> pandas (or Spark) data source -> dataframe asset -> whole-dataframe batch definition ->
suite -> ValidationDefinition -> Checkpoint -> ``run(batch_parameters={"dataframe": df})``; with a docs root the
data docs are built once at the end of the run (building them per table cost about a second each).

:func:`run_quality` reads a table of up to ``PANDAS_MAX_ROWS`` rows with delta-rs (no JVM) and validates it
with GX's pandas engine: the derived columns are computed on the Arrow table and the column types are read from
the Delta schema, as Spark would see them. Only larger tables go through Spark, whose session is then built
(``spark`` may be a session or a function returning one). Every Spark expectation costs Spark jobs, so each such
table's DataFrame is cached once for all of its expectations.
"""

from __future__ import annotations

import html
import json
import logging
import os
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from models import quality as mq
from models.fold import Cause
from models.states import (
    PARTITION_VALID_PREVIOUS,
    REPLICA_VALID_PREVIOUS_BEFORE_2_3,
    REPLICA_VALID_PREVIOUS_FROM_2_3,
    legal_pairs,
    partition_valid_previous,
    replica_valid_previous,
)
from models.tables import METADATA_EVENTS, PARTITION_TRANSITIONS, QUALITY_RESULTS, READABLE
from services import metadata_events
from services.errors import UserError

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa
    from great_expectations.expectations import Expectation as GxExpectation
    from pyspark.sql import Column, DataFrame, SparkSession

    from lakehouse import Lake

log = logging.getLogger(__name__)

# models.tables type vocabulary -> the Spark type class name GX compares against
SPARK_TYPE_NAMES: dict[str, str] = {
    "string": "StringType",
    "int": "IntegerType",
    "bigint": "LongType",
    "double": "DoubleType",
    "boolean": "BooleanType",
    "timestamp": "TimestampType",
    "binary": "BinaryType",
    "array<int>": "ArrayType",
    "array<string>": "ArrayType",
}
# Delta schema type names -> the Spark type class Spark's Delta reader gives them (what a Spark read's schema shows)
DELTA_TYPE_NAMES: dict[str, str] = {
    "string": "StringType", "long": "LongType", "integer": "IntegerType", "short": "ShortType", "byte": "ByteType",
    "float": "FloatType", "double": "DoubleType", "boolean": "BooleanType", "binary": "BinaryType",
    "date": "DateType", "timestamp": "TimestampType", "timestamp_ntz": "TimestampNTZType", "array": "ArrayType",
    "map": "MapType", "struct": "StructType",
}
QUALITY_DIR = "_quality"
# Up to this many rows a table is validated by GX's pandas engine (one toPandas, then milliseconds per
# expectation); beyond it by GX's Spark engine, where every expectation costs Spark jobs (about a second
# each on 2 cores), which would make a 260-expectation run take minutes on tables of a few hundred rows.
PANDAS_MAX_ROWS = 500_000
_OBSERVED_MAX = 300  # characters of the observed value kept per result
_SPARK_SOURCE, _PANDAS_SOURCE = "zkledger", "zkledger_pandas"  # GX data source names


@dataclass(frozen=True)
class ExpectationResult:
    table: str
    expectation: str  # models.quality Expectation.name
    column: str | None
    success: bool
    observed: str


@dataclass(frozen=True)
class SuiteResult:
    table: str
    results: tuple[ExpectationResult, ...]
    rows: int
    table_version: int | None = None

    @property
    def success(self) -> bool:
        return all(r.success for r in self.results)

    @property
    def failed(self) -> tuple[ExpectationResult, ...]:
        return tuple(r for r in self.results if not r.success)

    def line(self) -> str:
        """One line per suite for the console, naming each broken expectation."""
        head = f"{self.table}_suite: "
        n = len(self.results)
        if self.success:
            return f"{head}PASS {n}/{n} expectations ({self.rows} rows)"
        broken = "; ".join(f"{r.expectation} [{r.observed}]" for r in self.failed)
        return f"{head}FAIL {len(self.failed)}/{n} expectations failed ({self.rows} rows): {broken}"


@dataclass(frozen=True)
class QualityReport:
    run_id: str
    run_at: datetime
    suites: tuple[SuiteResult, ...]
    skipped: tuple[str, ...] = field(default=())  # tables absent from the lake

    @property
    def success(self) -> bool:
        return all(s.success for s in self.suites)

    @property
    def failed_suites(self) -> tuple[SuiteResult, ...]:
        return tuple(s for s in self.suites if not s.success)

    def suite(self, table: str) -> SuiteResult:
        for s in self.suites:
            if s.table == table:
                return s
        raise KeyError(table)

    def summary(self) -> str:
        n = sum(len(s.results) for s in self.suites)
        bad = sum(len(s.failed) for s in self.suites)
        verdict = "passed" if self.success else f"FAILED ({', '.join(s.table for s in self.failed_suites)})"
        return f"check {verdict}: {len(self.suites)} suites, {n} expectations, {bad} failed"


# ---------------------------------------------------------------------------------------------- derived columns
def _pairs_column(from_col: Column, to_col: Column, pairs: Iterable[tuple[str, str]]) -> Column:
    from pyspark.sql import functions as F

    cond = F.lit(False)
    for a, b in sorted(pairs):
        cond = cond | ((from_col == F.lit(a)) & (to_col == F.lit(b)))
    return cond


def _legal_sets(table: str, kafka_version: str | None) -> tuple[frozenset[tuple[str, str]], frozenset[tuple[str, str]]]:
    """(pairs that must be flagged legal, pairs that may be): without a version, pairs whose legality changed in
    2.3 accept both."""
    if table == PARTITION_TRANSITIONS.name:
        always = legal_pairs(partition_valid_previous(kafka_version) if kafka_version else PARTITION_VALID_PREVIOUS)
        return always, always
    if kafka_version:
        pairs = legal_pairs(replica_valid_previous(kafka_version))
        return pairs, pairs
    before, after = legal_pairs(REPLICA_VALID_PREVIOUS_BEFORE_2_3), legal_pairs(REPLICA_VALID_PREVIOUS_FROM_2_3)
    return before & after, before | after


def _legal_flag_consistent(df: DataFrame, table: str, kafka_version: str | None) -> DataFrame:
    """legal must equal Kafka's table (see `_legal_sets`). A failover re-seed is no transition Kafka validates
    (the new controller re-initialises): always legal."""
    from pyspark.sql import functions as F

    always, sometimes = _legal_sets(table, kafka_version)
    fr, to, legal = F.col("from_state"), F.col("to_state"), F.col("legal")
    must_be_legal = _pairs_column(fr, to, always)
    may_be_legal = _pairs_column(fr, to, sometimes)
    reseed = F.col("cause") == F.lit(str(Cause.FAILOVER_RESEED))
    ok = F.when(reseed, legal).when(must_be_legal, legal).when(may_be_legal, F.lit(True)).otherwise(~legal)
    return df.withColumn(mq.Derived.LEGAL_FLAG_CONSISTENT.value, F.coalesce(ok, F.lit(False)))


def _partition_known(df: DataFrame, reference: Mapping[str, DataFrame]) -> DataFrame:
    """Small left join against the distinct (cluster, topic, partition) of metadata_events."""
    from pyspark.sql import functions as F

    meta = reference[METADATA_EVENTS.name]
    known = (
        meta.where(F.col("topic").isNotNull() & F.col("partition").isNotNull())
        .select("cluster", "topic", "partition")
        .distinct()
        .withColumn("_known", F.lit(True))
    )
    joined = df.join(known, on=["cluster", "topic", "partition"], how="left")
    return joined.withColumn(mq.Derived.PARTITION_KNOWN.value, F.coalesce(F.col("_known"), F.lit(False))).drop(
        "_known"
    )


def _tenure_ordered(df: DataFrame) -> DataFrame:
    from pyspark.sql import functions as F

    ok = F.col("end_zxid").isNull() | F.col("start_zxid").isNull() | (F.col("end_zxid") >= F.col("start_zxid"))
    return df.withColumn(mq.Derived.TENURE_ORDERED.value, ok)


def add_derived(
    df: DataFrame,
    suite: mq.Suite,
    reference: Mapping[str, DataFrame],
    kafka_version: str | None = None,
) -> tuple[DataFrame, mq.Suite]:
    """Add the suite's derived columns; drop derived checks whose reference table is not at hand."""
    skipped: set[str] = set()
    for d in suite.derived:
        if d is mq.Derived.LEGAL_FLAG_CONSISTENT:
            df = _legal_flag_consistent(df, suite.table, kafka_version)
        elif d is mq.Derived.PARTITION_KNOWN:
            if METADATA_EVENTS.name not in reference:
                log.info("%s: no metadata_events at hand, %s not checked", suite.table, d.value)
                skipped.add(d.value)
                continue
            df = _partition_known(df, reference)
        elif d is mq.Derived.TENURE_ORDERED:
            df = _tenure_ordered(df)
    if skipped:
        kept = tuple(e for e in suite.expectations if e.column not in skipped)
        suite = mq.Suite(suite.table, kept, tuple(d for d in suite.derived if d.value not in skipped))
    return df, suite


# ---------------------------------------------------------------------------------------------- the same, on Arrow
_SEP = "\x1f"  # joins key parts into one string: no state, topic or cluster name holds it


def _pair_keys(pairs: Iterable[tuple[str, str]]) -> pa.Array:
    import pyarrow as pa

    return pa.array(sorted(a + _SEP + b for a, b in pairs), pa.string())


def _arrow_legal_flag_consistent(data: pa.Table, table: str, kafka_version: str | None) -> pa.Array:
    """`_legal_flag_consistent` on an Arrow table (a null anywhere reads as not consistent, as there)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    always, sometimes = _legal_sets(table, kafka_version)
    pair = pc.binary_join_element_wise(data["from_state"], data["to_state"], _SEP)
    must, may = pc.is_in(pair, _pair_keys(always)), pc.is_in(pair, _pair_keys(sometimes))
    legal = data["legal"]
    reseed = pc.fill_null(pc.equal(data["cause"], str(Cause.FAILOVER_RESEED)), False)
    ok = pc.if_else(reseed, legal, pc.if_else(must, legal, pc.if_else(may, pa.scalar(True), pc.invert(legal))))
    return pc.fill_null(ok, False)


def _partition_keys(cluster: pa.ChunkedArray, topic: pa.ChunkedArray, partition: pa.ChunkedArray) -> pa.ChunkedArray:
    import pyarrow as pa
    import pyarrow.compute as pc

    return pc.binary_join_element_wise(cluster, topic, pc.cast(partition, pa.string()), _SEP)


def _arrow_partition_known(data: pa.Table, meta: pa.Table) -> pa.Array:
    """`_partition_known` on Arrow: (cluster, topic, partition) among metadata_events' (null never matches)."""
    import pyarrow.compute as pc

    known = pc.unique(pc.drop_null(_partition_keys(meta["cluster"], meta["topic"], meta["partition"])))
    return pc.fill_null(pc.is_in(_partition_keys(data["cluster"], data["topic"], data["partition"]), known), False)


def _arrow_tenure_ordered(data: pa.Table) -> pa.Array:
    import pyarrow.compute as pc

    start, end = data["start_zxid"], data["end_zxid"]
    return pc.fill_null(pc.or_kleene(pc.or_kleene(pc.is_null(end), pc.is_null(start)),
                                     pc.greater_equal(end, start)), False)


def add_derived_arrow(
    data: pa.Table,
    suite: mq.Suite,
    metadata_keys: Callable[[], pa.Table | None],
    kafka_version: str | None = None,
) -> tuple[pa.Table, mq.Suite]:
    """`add_derived` on an Arrow table. ``metadata_keys`` returns metadata_events' cluster, topic and partition
    columns, or None when there is no such table (the cross-table check is then left out, as there)."""
    skipped: set[str] = set()
    for d in suite.derived:
        if d is mq.Derived.LEGAL_FLAG_CONSISTENT:
            data = data.append_column(d.value, _arrow_legal_flag_consistent(data, suite.table, kafka_version))
        elif d is mq.Derived.PARTITION_KNOWN:
            meta = metadata_keys()
            if meta is None:
                log.info("%s: no metadata_events at hand, %s not checked", suite.table, d.value)
                skipped.add(d.value)
                continue
            data = data.append_column(d.value, _arrow_partition_known(data, meta))
        elif d is mq.Derived.TENURE_ORDERED:
            data = data.append_column(d.value, _arrow_tenure_ordered(data))
    if skipped:
        kept = tuple(e for e in suite.expectations if e.column not in skipped)
        suite = mq.Suite(suite.table, kept, tuple(d for d in suite.derived if d.value not in skipped))
    return data, suite


def delta_type_names(lake: Lake, table: str, version: int | None) -> dict[str, str]:
    """Each column's Spark type name as Spark's Delta reader gives it: the stored Delta schema's, and the spec's
    for a column the files do not have yet (`lakehouse.spark_io.read_table` reads it as a typed null)."""
    stored: dict[str, str] = {}
    for f in lake.snapshot(table, version=version).schema().fields:
        kind = str(getattr(f.type, "type", ""))
        stored[f.name] = "DecimalType" if kind.startswith("decimal") else DELTA_TYPE_NAMES.get(kind, kind)
    return {name: stored.get(name) or spec for name, spec in _spec_type_names(table).items()}


def _spec_type_names(table: str) -> dict[str, str]:
    """Each column's Spark type name by the spec: a view's columns, made when read, have no stored schema."""
    return {c.name: SPARK_TYPE_NAMES.get(c.type, c.type) for c in READABLE[table].columns}


# ---------------------------------------------------------------------------------------------- GX glue
def _gx_expectation(e: mq.Expectation) -> GxExpectation:
    import great_expectations.expectations as gxe

    meta = {"zkledger": e.name}
    column = e.column or ""  # read only by the single-column checks, which always name one
    match e.check:
        case mq.Check.COLUMNS_PRESENT:
            return gxe.ExpectTableColumnsToMatchSet(column_set=list(e.columns), exact_match=False, meta=meta)
        case mq.Check.COLUMN_TYPE:
            type_ = SPARK_TYPE_NAMES[e.type_name or ""]
            return gxe.ExpectColumnValuesToBeOfType(column=column, type_=type_, meta=meta)
        case mq.Check.NOT_NULL:
            return gxe.ExpectColumnValuesToNotBeNull(column=column, meta=meta)
        case mq.Check.UNIQUE:
            return gxe.ExpectColumnValuesToBeUnique(column=column, meta=meta)
        case mq.Check.COMPOUND_UNIQUE:
            return gxe.ExpectCompoundColumnsToBeUnique(column_list=list(e.columns), meta=meta)
        case mq.Check.IN_SET:
            return gxe.ExpectColumnValuesToBeInSet(column=column, value_set=list(e.values), meta=meta)
        case mq.Check.MIN_VALUE:
            return gxe.ExpectColumnValuesToBeBetween(column=column, min_value=e.min_value, meta=meta)
        case mq.Check.ALL_TRUE:
            return gxe.ExpectColumnValuesToBeInSet(column=column, value_set=[True], meta=meta)
    raise ValueError(f"unknown check {e.check}")


class _Validator:
    """One GX context reused for every suite of a run (building it is the slow part)."""

    def __init__(self, docs_root: str | None = None) -> None:
        import great_expectations as gx
        from great_expectations.data_context.types.base import ProgressBarsConfig

        logging.getLogger("great_expectations").setLevel(logging.WARNING)
        self._gx = gx
        # with docs_root: a file context there, and every checkpoint updates GX data docs under it
        self.docs = docs_root is not None
        self.context = (gx.get_context(mode="file", project_root_dir=docs_root) if docs_root
                        else gx.get_context(mode="ephemeral"))
        self._run_id = uuid.uuid4().hex[:8]  # names persist in a file context: keep them unique per run
        self.context.variables.progress_bars = ProgressBarsConfig(globally=False)
        if self.docs:
            self._forget_earlier_runs()
        # add_or_update: a file context keeps the data sources of the run before (a second `check`)
        self._spark_source: Any = None  # added on first use: GX's test of it starts a SparkSession
        self.pandas_source = self.context.data_sources.add_or_update_pandas(name=_PANDAS_SOURCE)
        self._n = 0
        self._docs_resources: list[Any] = []  # the validation results and suites build_docs() renders

    def _forget_earlier_runs(self) -> None:
        """Drop the checkpoints, validation definitions, suites and data sources an earlier run left in the
        file context, so it does not grow with every run. Their validation results (the data docs' history)
        stay. Best effort: a leftover that cannot be loaded is left alone."""
        for collection in (self.context.checkpoints, self.context.validation_definitions, self.context.suites):
            try:
                names = [item.name for item in collection.all()]
            except Exception:
                log.debug("cannot list %s of earlier runs", type(collection).__name__, exc_info=True)
                continue
            for name in names:
                try:
                    collection.delete(name)
                except Exception:
                    log.debug("cannot delete %s", name, exc_info=True)
        for name in (_SPARK_SOURCE, _PANDAS_SOURCE):
            try:
                self.context.data_sources.delete(name)
            except Exception:  # absent (the first run)
                log.debug("no data source %s to delete", name, exc_info=True)

    def validate(self, suite: mq.Suite, df: DataFrame, table_version: int | None = None) -> SuiteResult:
        """Validate a (cached) Spark DataFrame: as pandas when small, else with GX's Spark engine."""
        rows = df.count()  # cached: cheap
        if rows <= PANDAS_MAX_ROWS:
            types = {f.name: type(f.dataType).__name__ for f in df.schema.fields}
            return self.validate_pandas(suite, df.toPandas(), types, table_version)
        if self._spark_source is None:
            self._spark_source = self.context.data_sources.add_or_update_spark(name=_SPARK_SOURCE, persist=False)
        return self._run(suite, df, self._spark_source, list(suite.expectations), [], rows, table_version)

    def validate_pandas(self, suite: mq.Suite, frame: pd.DataFrame, types: Mapping[str, str],
                        table_version: int | None = None) -> SuiteResult:
        """Validate a pandas DataFrame; pandas has no Spark types, so the column types are checked on ``types``
        (each column's Spark type class name)."""
        checked: list[ExpectationResult] = []
        for e in suite.expectations:
            if e.check is mq.Check.COLUMN_TYPE:
                want = SPARK_TYPE_NAMES[e.type_name or ""]
                got = types.get(e.column or "")
                checked.append(ExpectationResult(suite.table, e.name, e.column, got == want, json.dumps(got)))
        gx_checks = [e for e in suite.expectations if e.check is not mq.Check.COLUMN_TYPE]
        return self._run(suite, frame, self.pandas_source, gx_checks, checked, len(frame), table_version)

    def _run(self, suite: mq.Suite, batch: Any, source: Any, gx_checks: list[mq.Expectation],
             results: list[ExpectationResult], rows: int, table_version: int | None) -> SuiteResult:
        from great_expectations.data_context.types.resource_identifiers import ExpectationSuiteIdentifier

        gx = self._gx
        self._n += 1
        name = f"{suite.table}_{self._run_id}_{self._n}"
        asset = source.add_dataframe_asset(name)
        batch_def = asset.add_batch_definition_whole_dataframe(name)
        by_name = {e.name: e for e in gx_checks}
        # the suite is stored once with all its expectations (suite.add_expectation saves it each time)
        gx_suite = self.context.suites.add(gx.ExpectationSuite(name=f"{suite.name}_{self._run_id}_{self._n}",
                                                               expectations=[_gx_expectation(e) for e in gx_checks]))
        vd = self.context.validation_definitions.add(gx.ValidationDefinition(name=name, data=batch_def, suite=gx_suite))
        # no UpdateDataDocsAction here: the results are stored by the run, the docs built once by build_docs()
        checkpoint = self.context.checkpoints.add(
            gx.Checkpoint(name=name, validation_definitions=[vd], result_format={"result_format": "BASIC"}))
        run = checkpoint.run(batch_parameters={"dataframe": batch})
        for key, vr in run.run_results.items():
            self._docs_resources.append(key)
            self._docs_resources.append(ExpectationSuiteIdentifier(name=vr.suite_name))
            for r in vr.results:
                config = r.expectation_config
                e = by_name[str(((config.meta if config else None) or {}).get("zkledger"))]
                results.append(
                    ExpectationResult(suite.table, e.name, e.column, bool(r.success), _observed(r.result, r.exception_info))
                )
        order = {e.name: i for i, e in enumerate(suite.expectations)}
        results.sort(key=lambda x: order[x.expectation])
        return SuiteResult(suite.table, tuple(results), rows, table_version)

    def build_docs(self) -> None:
        """GX data docs of this run's validations (with a docs root): one site build for the whole run."""
        if self.docs and self._docs_resources:
            self.context.build_data_docs(resource_identifiers=self._docs_resources, build_index=True)


def _observed(result: Mapping[str, Any] | None, exception_info: Any) -> str:
    """A short text of what GX saw: the observed value, or the unexpected count and a few examples."""
    result = result or {}
    raised = exception_info.get("raised_exception") if isinstance(exception_info, Mapping) else False
    if raised:
        text = f"error: {exception_info.get('exception_message')}"
    elif "unexpected_count" in result:
        examples = result.get("partial_unexpected_list") or []
        text = f"{result['unexpected_count']} unexpected"
        if examples:
            text += f", e.g. {json.dumps(examples[:5], default=str)}"
    elif "observed_value" in result:
        text = json.dumps(result["observed_value"], default=str)
    else:
        text = ""
    return text if len(text) <= _OBSERVED_MAX else text[: _OBSERVED_MAX - 1] + "…"


# ---------------------------------------------------------------------------------------------- entry points
def run_quality_on_batch(
    spark: SparkSession,
    df_by_table: Mapping[str, DataFrame],
    *,
    reference: Mapping[str, DataFrame] | None = None,
    kafka_version: str | None = None,
    table_versions: Mapping[str, int | None] | None = None,
    docs_root: str | None = None,
) -> QualityReport:
    """Validate the given DataFrames (one suite each); writes nothing but, with ``docs_root``, GX data docs.

    ``reference`` holds tables cross-table checks join against (default: ``df_by_table``); a derived
    check whose reference is missing is left out rather than failed. Unknown table names raise UserError.
    """
    unknown = sorted(set(df_by_table) - set(mq.SUITES))
    if unknown:
        raise UserError(f"no quality suite for table(s): {', '.join(unknown)}")
    del spark  # the DataFrames carry their session; kept for the foreachBatch call shape
    reference = dict(df_by_table) if reference is None else {**df_by_table, **reference}
    run_at = datetime.now(UTC)
    validator = _Validator(docs_root)
    suites = _validate_frames(validator, df_by_table, reference, kafka_version, table_versions or {})
    validator.build_docs()
    return QualityReport(uuid.uuid4().hex[:16], run_at, tuple(suites))


def _validate_frames(validator: _Validator, df_by_table: Mapping[str, DataFrame], reference: Mapping[str, DataFrame],
                     kafka_version: str | None, table_versions: Mapping[str, int | None]) -> list[SuiteResult]:
    suites = []
    for table, df in df_by_table.items():
        derived_df, suite = add_derived(df, mq.SUITES[table], reference, kafka_version)
        cached = derived_df.cache()
        try:
            result = validator.validate(suite, cached, table_versions.get(table))
        finally:
            cached.unpersist()
        log.info("%s", result.line())
        suites.append(result)
    return suites


def run_quality(
    spark: SparkSession | Callable[[], SparkSession] | None,
    lake: Lake,
    *,
    tables: Iterable[str] | None = None,
    kafka_version: str | None = None,
    write_results: bool = True,
    pandas_max_rows: int = PANDAS_MAX_ROWS,
) -> QualityReport:
    """Validate the current snapshot of each table (all of models.tables by default, the views too) in the lake.

    A table of up to ``pandas_max_rows`` rows is read with delta-rs and validated by GX's pandas engine, with no
    JVM; a larger one through Spark: ``spark`` is the session, or a function that builds it (called only then).
    The ``metadata_events`` view is sized by the stored rows it is made from, and has no version.
    """
    wanted = list(tables) if tables is not None else list(READABLE)
    bad = [t for t in wanted if t not in mq.SUITES]
    if bad:
        raise UserError(f"unknown table(s): {', '.join(bad)} (known: {', '.join(READABLE)})")
    present = [t for t in wanted if (metadata_events.exists(lake) if t == METADATA_EVENTS.name else lake.exists(t))]
    skipped = tuple(t for t in wanted if t not in present)
    versions = {t: None if t == METADATA_EVENTS.name else lake.version(t) for t in present}

    def rows(table: str) -> int:
        if table == METADATA_EVENTS.name:
            return sum(lake.row_count(t) for t in metadata_events.STORED if lake.exists(t))
        return lake.row_count(table, versions[table])

    large = [t for t in present if rows(t) > pandas_max_rows]
    docs_root = os.path.join(str(lake.root), QUALITY_DIR, "gx") if write_results else None
    run_at = datetime.now(UTC)
    validator = _Validator(docs_root)
    by_table: dict[str, SuiteResult] = {}
    view: list[pa.Table] = []  # the metadata_events view, made once when first needed

    def metadata_view() -> pa.Table:
        if not view:
            view.append(metadata_events.read(lake))
        return view[0]

    def metadata_keys() -> pa.Table | None:
        return metadata_view().select(["cluster", "topic", "partition"]) if metadata_events.exists(lake) else None

    for table in (t for t in present if t not in large):
        is_view = table == METADATA_EVENTS.name
        data, suite = add_derived_arrow(metadata_view() if is_view else lake.read_arrow(table, version=versions[table]),
                                        mq.SUITES[table], metadata_keys, kafka_version)
        types = _spec_type_names(table) if is_view else delta_type_names(lake, table, versions[table])
        result = validator.validate_pandas(suite, data.to_pandas(), types, versions[table])
        log.info("%s", result.line())
        by_table[table] = result
    if large:
        if spark is None:
            raise UserError(f"{', '.join(large)}: more than {pandas_max_rows:,} rows, which only Spark validates")
        by_table.update((r.table, r) for r in _validate_large(spark, lake, large, versions, validator, kafka_version))
    validator.build_docs()
    report = QualityReport(uuid.uuid4().hex[:16], run_at, tuple(by_table[t] for t in present), skipped)
    if write_results:
        store_results(lake, report)
        write_results_html(lake, report)
    return report


def _validate_large(spark: SparkSession | Callable[[], SparkSession], lake: Lake, large: list[str],
                    versions: Mapping[str, int | None], validator: _Validator,
                    kafka_version: str | None) -> list[SuiteResult]:
    """The tables too large for pandas, read and validated with Spark."""
    from lakehouse.spark_io import read_table

    session = spark() if callable(spark) else spark
    frames = {t: metadata_events.frame(session, lake) if t == METADATA_EVENTS.name
              else read_table(session, lake, t, version=versions[t]) for t in large}
    reference = dict(frames)
    if METADATA_EVENTS.name not in reference and metadata_events.exists(lake):
        reference[METADATA_EVENTS.name] = metadata_events.frame(session, lake)
    return _validate_frames(validator, frames, reference, kafka_version, versions)


def result_rows(report: QualityReport) -> list[dict[str, Any]]:
    """quality_results rows (models.tables.QUALITY_RESULTS), one per expectation result."""
    return [
        {
            "run_id": report.run_id,
            "run_at": report.run_at,
            "table_name": r.table,
            "expectation": r.expectation,
            "column": r.column,
            "success": r.success,
            "observed": r.observed,
            "table_version": s.table_version,
        }
        for s in report.suites
        for r in s.results
    ]


def store_results(lake: Lake, report: QualityReport) -> None:
    rows = result_rows(report)
    if rows:
        # one writer per run: the run id is fresh, so batch 0 is always new
        lake.append(QUALITY_RESULTS.name, rows, writer_id=f"check:{report.run_id}", batch_seq=0)


def results_html(report: QualityReport) -> str:
    """A small self-contained page of one run (our stand-in for GX data docs: no assets, no JS)."""
    e = html.escape
    parts = [
        "<!doctype html><html><head><meta charset='utf-8'><title>zkledger quality</title><style>",
        "body{font:14px system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse;margin:.5em 0 2em}",
        "td,th{border:1px solid #ddd;padding:3px 8px;text-align:left}.ok{color:#1a7f37}.bad{color:#c62828;"
        "font-weight:600}code{font-size:12px}",
        "</style></head><body>",
        f"<h1>zkledger check {e(report.run_id)}</h1><p>{e(report.run_at.isoformat())} — {e(report.summary())}</p>",
    ]
    if report.skipped:
        parts.append(f"<p>absent tables (not checked): {e(', '.join(report.skipped))}</p>")
    for s in report.suites:
        cls = "ok" if s.success else "bad"
        verdict = "PASS" if s.success else "FAIL"
        parts.append(f"<h2 class='{cls}'>{e(s.table)}_suite: {verdict}</h2>")
        parts.append(f"<p>{s.rows} rows, table version {e(str(s.table_version))}</p>")
        parts.append("<table><tr><th>expectation</th><th>result</th><th>observed</th></tr>")
        for r in s.results:
            rc = "ok" if r.success else "bad"
            parts.append(
                f"<tr><td><code>{e(r.expectation)}</code></td><td class='{rc}'>{'ok' if r.success else 'FAILED'}"
                f"</td><td><code>{e(r.observed)}</code></td></tr>"
            )
        parts.append("</table>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_results_html(lake: Lake, report: QualityReport) -> str:
    """Write ``<lake>/_quality/<run_id>.html`` and ``index.html`` (the latest run); returns the index path."""
    folder = os.path.join(lake.root, QUALITY_DIR)
    os.makedirs(folder, exist_ok=True)
    page = results_html(report)
    with open(os.path.join(folder, f"{report.run_id}.html"), "w", encoding="utf-8") as fh:
        fh.write(page)
    index = os.path.join(folder, "index.html")
    with open(index, "w", encoding="utf-8") as fh:
        fh.write(page)
    return index
