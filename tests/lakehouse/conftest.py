"""Both Delta engines behind one small interface, so a test can run against either or pair them.

``delta_engine`` is parametrised over ``delta-rs`` (the deltalake package) and ``connector`` (Delta's Spark
connector in the session ``spark`` fixture): the lakehouse contract tests (test_lake.py) run once per engine.
``writer_engine``/``reader_engine`` pair them for interop tests (test_interop.py).
The Spark session is only started for the ``connector`` cases.
"""

from __future__ import annotations

import pytest

from tests.lakehouse.delta_engines import ENGINES, DeltaEngine, engine_named

# The connector's cases get `spark` at run time, so it is not among their fixtures: the parameter carries
# the mark instead.
PARAMS = [pytest.param(e, marks=pytest.mark.spark) if e == "connector" else e for e in ENGINES]


@pytest.fixture(params=PARAMS)
def delta_engine(request: pytest.FixtureRequest) -> DeltaEngine:
    """One engine per test run: ``delta-rs`` or ``connector``."""
    return engine_named(request, request.param)


@pytest.fixture(params=PARAMS)
def writer_engine(request: pytest.FixtureRequest) -> DeltaEngine:
    return engine_named(request, request.param)


@pytest.fixture(params=PARAMS)
def reader_engine(request: pytest.FixtureRequest) -> DeltaEngine:
    return engine_named(request, request.param)
