"""Spark runs the processor's ``init`` in a new Python process on the driver at every query start: importing
the processor's module there must not load pandas, pyarrow or the pipeline (no JVM needed to check)."""

from __future__ import annotations

import json
import subprocess
import sys

HEAVY = ("pandas", "pyarrow", "pipelines.bucket_fold", "engine.key_steps", "engine.stateful")


def test_the_processor_module_loads_no_pipeline_no_arrow_and_no_pandas() -> None:
    probe = ("import json, sys; import engine.key_processor; "
             f"print(json.dumps([m for m in {list(HEAVY)!r} if m in sys.modules]))")
    got = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert json.loads(got.stdout) == []


def test_the_processor_pickles_without_its_steps() -> None:
    import pickle
    from datetime import timedelta

    from engine.key_processor import PipelineProcessor

    processor = PipelineProcessor("2.8", timedelta(seconds=1), None, ("partition_state",), ("global_events",))
    copy = pickle.loads(pickle.dumps(processor))
    assert copy.steps is None and copy.bucket_part_names == ("partition_state",)
