"""`benchmarks.local_compiler`: each run's compilers reach the settings as a user's file would put them."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.local_compiler import COMPILERS, compiler_conf
from conf.settings import LocalCompiler, load_settings


@pytest.mark.parametrize("compiler", COMPILERS)
def test_a_compiler_file_sets_the_local_session_s_compilers(tmp_path: Path, compiler: LocalCompiler) -> None:
    assert load_settings(compiler_conf(tmp_path / "compiler.toml", compiler)).spark.local_compiler == compiler


def test_the_baseline_is_the_jvm_s_default_and_the_shipped_setting_is_measured_against_it() -> None:
    assert COMPILERS == (LocalCompiler.C2, LocalCompiler.C1)
    assert load_settings().spark.local_compiler == LocalCompiler.C1
