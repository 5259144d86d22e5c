"""The CLI contract: help for every command, one-line errors, exit codes, summary printed last."""

from __future__ import annotations

import argparse
import subprocess
import sys
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import zkledger.commands as commands
from services.errors import UserError
from zkledger.cli import build_parser, main


def fake_command(monkeypatch: pytest.MonkeyPatch, name: str, run: Callable[[argparse.Namespace, Any], Any]) -> None:
    """Register an extra command module `zkledger.commands.<name>` for this test only."""
    module = types.ModuleType(f"zkledger.commands.{name}")

    def register(subparsers: Any) -> None:
        parser = subparsers.add_parser(name, help=f"test command {name}")
        parser.add_argument("--n", type=int, default=1)
        parser.set_defaults(handler=run)

    module.register = register  # type: ignore[attr-defined]
    module.run = run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(commands, "COMMANDS", (*commands.COMMANDS, name))


def _command_names() -> list[str]:
    """The names the CLI accepts (a module may register a spelling of its own, e.g. kafka_lab -> kafka-lab)."""
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(sub.choices)


def test_every_command_module_registers_a_command() -> None:
    assert len(_command_names()) == len(commands.COMMANDS)


def test_top_level_help_lists_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    for name in _command_names():
        assert f"    {name} " in out or f"    {name}\n" in out, name


@pytest.mark.parametrize("name", _command_names())
def test_every_command_has_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        main([name, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: zkledger {name}")
    assert "(unavailable:" not in out


def test_contract_commands_are_registered_with_their_options(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, option in [(["zk"], "--data-dir"), (["state"], "--zxid"), (["anomalies"], "--kind"),
                         (["report"], "--out"), (["monitor"], "--available-now"), (["collect", "txnlog"], "--dir"),
                         (["collect", "kraft"], "--dir")]:
        with pytest.raises(SystemExit):
            main([*argv, "--help"])
        assert option in capsys.readouterr().out, argv


def test_summary_is_the_last_line_and_global_options_reach_the_context(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    seen: dict[str, Any] = {}

    def run(args: argparse.Namespace, ctx: Any) -> str:
        seen.update(lake=ctx.lake_root, cluster=ctx.cluster, n=args.n, ckpt=ctx.settings.streaming.checkpoint_root)
        print("working...")
        return f"did {args.n} things"

    fake_command(monkeypatch, "zz_ok", run)
    lake = str(tmp_path / "lk")
    assert main(["--cluster", "c1", "zz_ok", "--n", "3", "--lake", lake]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == "did 3 things"
    assert seen == {"lake": lake, "cluster": "c1", "n": 3, "ckpt": str(Path(lake) / "_checkpoints")}


def test_global_options_also_follow_a_subcommand(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str],
                                                 tmp_path: Path) -> None:
    seen: dict[str, Any] = {}

    def run(args: argparse.Namespace, ctx: Any) -> str:
        seen.update(lake=ctx.lake_root, cluster=ctx.cluster, source=args.source)
        return "ok"

    module = types.ModuleType("zkledger.commands.zz_nested")

    def register(subparsers: Any) -> None:  # a command with subcommands, like `collect zk|txnlog|logs`
        parser = subparsers.add_parser("zz_nested", help="nested")
        sub = parser.add_subparsers(dest="source", required=True)
        sub.add_parser("inner", help="inner")
        parser.set_defaults(handler=run)

    module.register = register  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(commands, "COMMANDS", (*commands.COMMANDS, "zz_nested"))
    lake = str(tmp_path / "lk")
    assert main(["--cluster", "c1", "zz_nested", "inner", "--lake", lake]) == 0
    assert seen == {"lake": lake, "cluster": "c1", "source": "inner"}
    with pytest.raises(SystemExit):
        main(["collect", "logs", "--help"])
    assert "--lake DIR" in capsys.readouterr().out


def test_command_may_choose_its_exit_code(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    fake_command(monkeypatch, "zz_fail", lambda args, ctx: ("1 suite failed", 1))
    assert main(["zz_fail"]) == 1
    assert capsys.readouterr().out.strip() == "1 suite failed"


def test_user_error_is_one_line_exit_1(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace, ctx: Any) -> str:
        raise UserError("no such topic: orders\n(second line is folded)")

    fake_command(monkeypatch, "zz_user", run)
    assert main(["zz_user"]) == 1
    captured = capsys.readouterr()
    assert captured.err == "error: no such topic: orders (second line is folded)\n"
    assert captured.out == ""


def test_keyboard_interrupt_exits_130_quietly(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def run(args: argparse.Namespace, ctx: Any) -> str:
        raise KeyboardInterrupt

    fake_command(monkeypatch, "zz_int", run)
    assert main(["zz_int"]) == 130
    assert "Traceback" not in capsys.readouterr().err


def test_a_command_module_that_fails_to_import_does_not_break_the_cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(commands, "COMMANDS", (*commands.COMMANDS, "zz_missing"))
    assert main(["zk", "status", "--data-dir", "/nonexistent/zk"]) == 0
    assert main(["zz_missing"]) == 1
    assert capsys.readouterr().err.startswith("error: zkledger zz_missing: cannot load the command (ModuleNotFoundError")


def test_bad_port_is_a_user_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["zk", "start", "--port", "70000", "--data-dir", str(tmp_path)]) == 1
    assert capsys.readouterr().err == "error: --port must be between 0 and 65535, got 70000\n"


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    script = Path(sys.executable).with_name("zkledger")
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "zkledger.cli"]
    return subprocess.run([*cmd, *args], capture_output=True, text=True, timeout=120, cwd=cwd,
                          stdin=subprocess.DEVNULL)


def test_bad_conf_file_gives_one_line_and_exit_1(tmp_path: Path) -> None:
    conf = tmp_path / "bad.toml"
    conf.write_text('[spark]\nshuffle_partitions = "x"\n')
    result = run_cli("--conf", str(conf), "zk", "status", cwd=tmp_path)
    assert result.returncode == 1
    assert result.stderr == "error: conf: spark.shuffle_partitions must be a positive integer, got 'x'\n"
    assert result.stdout == ""
