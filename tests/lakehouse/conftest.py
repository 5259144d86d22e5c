"""Both Delta engines behind one small interface, paired for the interop tests (test_interop.py):
``writer_engine``/``reader_engine``, each ``delta-rs`` (the deltalake package) or ``connector`` (Delta's Spark
connector in the session ``spark`` fixture, started only for the ``connector`` cases).
"""

from __future__ import annotations

import pytest

from tests.lakehouse.delta_engines import ENGINES, DeltaEngine, engine_named

# The connector's cases get `spark` at run time, so it is not among their fixtures: the parameter carries
# the mark instead.
PARAMS = [pytest.param(e, marks=pytest.mark.spark) if e == "connector" else e for e in ENGINES]


@pytest.fixture(params=PARAMS)
def writer_engine(request: pytest.FixtureRequest) -> DeltaEngine:
    return engine_named(request, request.param)


@pytest.fixture(params=PARAMS)
def reader_engine(request: pytest.FixtureRequest) -> DeltaEngine:
    return engine_named(request, request.param)
