"""Settings: defaults, overlay, overrides, and one-line errors naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from conf.settings import Settings, SettingsError, deep_merge, load_settings


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "conf.toml"
    path.write_text(text)
    return path


def test_defaults_load_from_the_package_not_the_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    s = load_settings()
    assert isinstance(s, Settings)
    assert (s.lake.root, s.lake.cluster) == ("./lake", "local")
    assert (s.spark.master, s.spark.shuffle_partitions) == ("local[2]", 2)
    assert (s.streaming.trigger_seconds, s.streaming.max_files_per_trigger) == (1.0, 1000)
    assert (s.pipeline.buckets, s.pipeline.rebuild_batch_mb) == (32, 32)
    assert Path(s.streaming.checkpoint_root) == Path("./lake/_checkpoints")
    assert s.monitor.webhook == "" and s.monitor.quality_each_batch is False
    assert s.zookeeper.tls.use_ssl is False and s.zookeeper.auth_data == []
    assert dict(s.spark.extra) == {}


def test_settings_are_frozen() -> None:
    s = load_settings()
    with pytest.raises(AttributeError):
        s.spark.master = "yarn"  # type: ignore[misc]


def test_overlay_deep_merges_and_keeps_other_defaults(tmp_path: Path) -> None:
    conf = write(tmp_path, """
[spark]
shuffle_partitions = 8
[spark.extra]
"spark.driver.memory" = "2g"
"spark.sql.adaptive.enabled" = false
[zookeeper]
chroot = "/kafka"
auth_scheme = "digest"
auth_credential = "u:p"
[zookeeper.tls]
use_ssl = true
""")
    s = load_settings(conf)
    assert s.spark.shuffle_partitions == 8
    assert s.spark.master == "local[2]"  # untouched default survives the merge
    assert dict(s.spark.extra) == {"spark.driver.memory": "2g", "spark.sql.adaptive.enabled": "false"}
    assert s.zookeeper.chroot == "/kafka" and s.zookeeper.tls.use_ssl and s.zookeeper.tls.verify
    assert s.zookeeper.auth_data == [("digest", "u:p")]


def test_cli_overrides_win_and_move_the_checkpoints(tmp_path: Path) -> None:
    conf = write(tmp_path, '[lake]\nroot = "/from/file"\ncluster = "file"\n')
    s = load_settings(conf, lake=str(tmp_path / "lk"), cluster="prod-1")
    assert (s.lake.root, s.lake.cluster) == (str(tmp_path / "lk"), "prod-1")
    assert s.streaming.checkpoint_root == str(tmp_path / "lk" / "_checkpoints")


def test_explicit_checkpoint_root_is_kept(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, '[streaming]\ncheckpoint_root = "/ck"\n'))
    assert s.streaming.checkpoint_root == "/ck"


def test_integer_is_accepted_where_a_number_is_expected(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, "[streaming]\ntrigger_seconds = 3\n"))
    assert s.streaming.trigger_seconds == 3.0 and isinstance(s.streaming.trigger_seconds, float)


def test_deep_merge_does_not_mutate_inputs() -> None:
    base = {"a": {"b": 1, "c": 2}}
    merged = deep_merge(base, {"a": {"b": 5}})
    assert merged == {"a": {"b": 5, "c": 2}} and base == {"a": {"b": 1, "c": 2}}


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('[spark]\nshuffle_partitions = "x"', "conf: spark.shuffle_partitions must be a positive integer, got 'x'"),
        ("[spark]\nshuffle_partitions = 0", "conf: spark.shuffle_partitions must be a positive integer, got 0"),
        ("[spark]\nshuffle_partitions = true", "conf: spark.shuffle_partitions must be a positive integer, got True"),
        ("[spark]\nshuffel_partitions = 2", "conf: unknown key spark.shuffel_partitions"),
        ("[sparks]\nmaster = 'local'", "conf: unknown key sparks"),
        ('[zookeeper.tls]\nverify = "yes"', "conf: zookeeper.tls.verify must be true or false, got 'yes'"),
        ('[zookeeper]\nhosts = "nohost"', "conf: zookeeper.hosts must be a comma-separated list of host:port"),
        ('[zookeeper]\nchroot = "kafka"', "conf: zookeeper.chroot must be empty or an absolute path"),
        ('[zookeeper]\nauth_scheme = "sasl"', "conf: zookeeper.auth_scheme must be '' or 'digest', got 'sasl'"),
        ("[streaming]\ntrigger_seconds = -1", "conf: streaming.trigger_seconds must be a positive number, got -1"),
        ("[pipeline]\nbuckets = 0", "conf: pipeline.buckets must be a positive integer, got 0"),
        ('[spark]\nlocal_compiler = "c3"', "conf: spark.local_compiler must be 'c1' or 'c2', got 'c3'"),
        # keys of the removed in-process engine: an old conf file fails loudly rather than being half-applied
        ('[pipeline]\nengine = "stateful"', "conf: unknown key pipeline.engine"),
        ("[pipeline]\nlocal_max_rows = 0", "conf: unknown key pipeline.local_max_rows"),
        ('[monitor]\nwebhook = "ftp://x"', "conf: monitor.webhook must be empty or an http(s) URL"),
        ('spark = "local"', "conf: spark must be a table, got 'local'"),
        ("[spark.extra]\nnested = { a = 1 }", "conf: spark.extra.nested must be a string, number or boolean"),
        ("[spark\nbroken", "is not valid TOML"),
    ],
)
def test_bad_values_give_one_line_naming_the_key(tmp_path: Path, toml: str, expected: str) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(write(tmp_path, toml))
    message = str(info.value)
    assert expected in message
    assert "\n" not in message


def test_missing_conf_file_is_a_settings_error(tmp_path: Path) -> None:
    with pytest.raises(SettingsError, match="file not found"):
        load_settings(tmp_path / "absent.toml")


def test_bad_cli_override_is_reported_like_a_file_value() -> None:
    with pytest.raises(SettingsError, match=r"lake\.cluster must be a non-empty name"):
        load_settings(cluster="")
