"""Qt's system libraries: the check, the install lines, when xcb is needed, and the
message that replaces Qt's abort."""

from __future__ import annotations

import pytest

from app import system_libs
from app.system_libs import QT_XCB_LIBRARIES, SystemLibrary


def test_missing_libraries_are_reported_with_install_lines() -> None:
    gone = {"libxcb-cursor.so.0", "libxcb-icccm4.so.4", "libxcb-keysyms.so.1", "libEGL.so.1"}
    missing = system_libs.missing_libraries(loader=lambda so: so not in gone)
    assert {m.soname for m in missing} == gone & {lib.soname for lib in QT_XCB_LIBRARIES}
    apt, dnf, pacman = system_libs.install_lines(missing)
    assert apt.endswith("sudo apt install libxcb-cursor0 libxcb-keysyms1 libegl1")
    assert dnf.endswith("sudo dnf install xcb-util-cursor xcb-util-keysyms libglvnd-egl")
    assert pacman.endswith("sudo pacman -S --needed xcb-util-cursor xcb-util-keysyms libglvnd")


def test_shared_packages_are_named_once() -> None:
    libs = [lib for lib in QT_XCB_LIBRARIES if lib.dnf == "libxcb"]
    assert len(libs) > 3
    assert system_libs.install_lines(libs)[1].split("install ")[1] == "libxcb"


def test_every_library_of_the_env_notes_is_checked() -> None:
    """The set a minimal Debian lacks (shared/ENV.md) is in the table, with apt names."""
    apt = {lib.apt for lib in QT_XCB_LIBRARIES}
    assert {"libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libxcb-image0", "libxcb-randr0",
            "libxcb-render-util0", "libxcb-shape0", "libxcb-xkb1", "libxkbcommon-x11-0", "libegl1"} <= apt


def test_this_machine_loads_a_real_library_and_not_a_fake_one() -> None:
    assert system_libs.loads("libc.so.6")
    assert not system_libs.loads("libtandem-does-not-exist.so.9")


@pytest.mark.parametrize(("env", "platform", "needed"), [
    ({}, "linux", True),
    ({"QT_QPA_PLATFORM": "offscreen"}, "linux", False),
    ({"QT_QPA_PLATFORM": "wayland"}, "linux", False),
    ({"QT_QPA_PLATFORM": "wayland;xcb"}, "linux", True),
    ({"QT_QPA_PLATFORM": "xcb:nograb"}, "linux", True),
    ({"XDG_SESSION_TYPE": "wayland", "WAYLAND_DISPLAY": "wayland-0"}, "linux", False),
    ({"XDG_SESSION_TYPE": "wayland"}, "linux", True),
    ({}, "darwin", False),
    ({}, "win32", False),
])
def test_when_xcb_is_needed(env: dict[str, str], platform: str, needed: bool) -> None:
    assert system_libs.needs_xcb(env, platform) is needed


def test_gui_problem_only_when_something_is_missing() -> None:
    assert system_libs.gui_problem({}, loader=lambda so: True, platform="linux") is None
    assert system_libs.gui_problem({"QT_QPA_PLATFORM": "offscreen"}, loader=lambda so: False,
                                   platform="linux") is None
    problem = system_libs.gui_problem({}, loader=lambda so: so != "libxcb-cursor.so.0", platform="linux")
    assert problem is not None and [m.soname for m in problem.missing] == ["libxcb-cursor.so.0"]
    assert "libxcb-cursor0" in problem.text and "start Tandem again" in problem.text


def test_an_import_error_names_the_package() -> None:
    exc = ImportError("libEGL.so.1: cannot open shared object file: No such file or directory")
    problem = system_libs.import_problem(exc)
    assert [m.apt for m in problem.missing] == ["libegl1"] and "sudo apt install libegl1" in problem.text
    unknown = system_libs.import_problem(ImportError("libfoo.so.3: cannot open shared object file"))
    assert unknown.missing == () and "libfoo.so.3" in unknown.text


def test_report_goes_to_stderr_the_log_and_the_notifier(caplog: pytest.LogCaptureFixture,
                                                        capsys: pytest.CaptureFixture[str]) -> None:
    lib = SystemLibrary("libx.so.1", "libx1", "libx", "libx")
    shown: list[str] = []
    system_libs.report_problem(system_libs._problem([lib]), notifier=lambda t, x: shown.append(t))
    assert "libx.so.1" in capsys.readouterr().err
    assert any("libx.so.1" in r.getMessage() for r in caplog.records)
    assert shown == ["Tandem cannot open its window"]


def test_main_prints_the_report(capsys: pytest.CaptureFixture[str]) -> None:
    assert system_libs.main(loader=lambda so: True) == 0
    assert "are installed" in capsys.readouterr().out
    assert system_libs.main(loader=lambda so: so != "libEGL.so.1") == 1
    out = capsys.readouterr().out
    assert "1 missing" in out and "sudo apt install libegl1" in out


def test_a_really_missing_library_gives_the_message_not_an_abort(tmp_path) -> None:
    """libxcb-cursor hidden from one process (a private mount namespace): ``python -m
    app`` prints the install line and exits 2 instead of Qt's abort (134)."""
    import os
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    real = Path("/usr/lib/x86_64-linux-gnu/libxcb-cursor.so.0").resolve()
    if not (sys.platform.startswith("linux") and real.is_file() and shutil.which("unshare")
            and os.geteuid() == 0):
        pytest.skip("needs root, unshare and an installed libxcb-cursor")
    probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip("mount namespaces are not allowed here")
    repo = Path(__file__).resolve().parents[1]
    env = dict(os.environ, PYTHONPATH=str(repo), QT_QPA_PLATFORM="xcb", TANDEM_HOME=str(tmp_path))
    env.pop("DISPLAY", None)  # no dialog: the message goes to stderr and the log
    script = f'mount --bind /dev/null "{real}" && exec "{sys.executable}" -m app'
    out = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True,
                         env=env, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 2, out.stderr
    assert "libxcb-cursor.so.0" in out.stderr and "sudo apt install libxcb-cursor0" in out.stderr
    assert "Aborted" not in out.stderr and out.stderr.count("sudo apt install") == 1
    log = (tmp_path / "logs" / "tandem.log").read_text()
    assert "Tandem cannot open its window" in log and "==== Tandem" in log
