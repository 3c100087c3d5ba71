"""Qt's system libraries: which are missing, and the command that installs them.

PySide6's wheels carry Qt itself but not the system libraries that Qt's X11 (``xcb``)
platform plugin links against. When one is missing, Qt does not raise: it prints "Could
not load the Qt platform plugin "xcb"" and aborts the process (exit status 134), so a
window started from a menu vanishes without a word. Before the window is created,
:func:`gui_problem` tries to load each library the plugin needs (``dlopen``, exactly as
Qt's loader would find it, bundled copies included) and, when some are missing, the
window is replaced by a readable message that names the distribution packages and the
``apt`` / ``dnf`` / ``pacman`` line that installs them (:func:`report_problem`).

``python -m app.system_libs`` (and ``packaging/install.sh``, and a frozen app's hidden
``--check-system-libs``) prints the same report. Qt-free.
"""

from __future__ import annotations

import ctypes
import logging
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SystemLibrary:
    """A shared library Qt needs from the system, and the package that ships it.

    Attributes:
        soname: the name the loader looks for (``libxcb-cursor.so.0``).
        apt: the Debian/Ubuntu package.
        dnf: the Fedora/RHEL package.
        pacman: the Arch Linux package.
    """

    soname: str
    apt: str
    dnf: str
    pacman: str


#: What Qt's xcb platform plugin (``libqxcb.so``, ``libQt6XcbQpa.so.6``) and QtGui load
#: from the system, read from their DT_NEEDED entries (PySide6 6.11). The first ten are
#: the ones a minimal Debian image lacks (shared/ENV.md).
QT_XCB_LIBRARIES: tuple[SystemLibrary, ...] = (
    SystemLibrary("libxcb-cursor.so.0", "libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    SystemLibrary("libxcb-icccm.so.4", "libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    SystemLibrary("libxcb-keysyms.so.1", "libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    SystemLibrary("libxcb-image.so.0", "libxcb-image0", "xcb-util-image", "xcb-util-image"),
    SystemLibrary("libxcb-randr.so.0", "libxcb-randr0", "libxcb", "libxcb"),
    SystemLibrary("libxcb-render-util.so.0", "libxcb-render-util0", "xcb-util-renderutil",
                  "xcb-util-renderutil"),
    SystemLibrary("libxcb-shape.so.0", "libxcb-shape0", "libxcb", "libxcb"),
    SystemLibrary("libxcb-xkb.so.1", "libxcb-xkb1", "libxcb", "libxcb"),
    SystemLibrary("libxkbcommon-x11.so.0", "libxkbcommon-x11-0", "libxkbcommon-x11",
                  "libxkbcommon-x11"),
    SystemLibrary("libEGL.so.1", "libegl1", "libglvnd-egl", "libglvnd"),
    SystemLibrary("libxcb-util.so.1", "libxcb-util1", "xcb-util", "xcb-util"),
    SystemLibrary("libxcb-shm.so.0", "libxcb-shm0", "libxcb", "libxcb"),
    SystemLibrary("libxcb-sync.so.1", "libxcb-sync1", "libxcb", "libxcb"),
    SystemLibrary("libxcb-xfixes.so.0", "libxcb-xfixes0", "libxcb", "libxcb"),
    SystemLibrary("libxcb-render.so.0", "libxcb-render0", "libxcb", "libxcb"),
    SystemLibrary("libxcb.so.1", "libxcb1", "libxcb", "libxcb"),
    SystemLibrary("libX11-xcb.so.1", "libx11-xcb1", "libX11-xcb", "libx11"),
    SystemLibrary("libX11.so.6", "libx11-6", "libX11", "libx11"),
    SystemLibrary("libxkbcommon.so.0", "libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    SystemLibrary("libGL.so.1", "libgl1", "libglvnd-glx", "libglvnd"),
    SystemLibrary("libfontconfig.so.1", "libfontconfig1", "fontconfig", "fontconfig"),
    SystemLibrary("libfreetype.so.6", "libfreetype6", "freetype", "freetype2"),
    SystemLibrary("libdbus-1.so.3", "libdbus-1-3", "dbus-libs", "dbus"),
)

_BY_SONAME = {lib.soname: lib for lib in QT_XCB_LIBRARIES}


def loads(soname: str) -> bool:
    """Whether the dynamic loader finds and loads ``soname`` (``dlopen``)."""
    try:
        ctypes.CDLL(soname)
    except OSError:
        return False
    return True


def missing_libraries(libraries: Iterable[SystemLibrary] = QT_XCB_LIBRARIES,
                      loader: Callable[[str], bool] | None = None) -> list[SystemLibrary]:
    """The libraries among ``libraries`` that ``loader`` (default :func:`loads`) cannot
    load, in order."""
    loader = loader or loads
    return [lib for lib in libraries if not loader(lib.soname)]


def install_lines(missing: Sequence[SystemLibrary]) -> list[str]:
    """The commands that install ``missing``: one for apt, dnf and pacman each."""
    def unique(names: Iterable[str]) -> str:
        return " ".join(dict.fromkeys(names))

    return [
        f"Debian, Ubuntu:  sudo apt install {unique(lib.apt for lib in missing)}",
        f"Fedora:          sudo dnf install {unique(lib.dnf for lib in missing)}",
        f"Arch Linux:      sudo pacman -S --needed {unique(lib.pacman for lib in missing)}",
    ]


def needs_xcb(environ: Mapping[str, str] | None = None, platform: str | None = None) -> bool:
    """Whether Qt will (or may fall back to) use its X11 ``xcb`` plugin here.

    Linux/BSD only. ``QT_QPA_PLATFORM`` decides when set (``offscreen``, ``wayland`` … do
    not need xcb; ``wayland;xcb`` does, as its fallback); unset, Qt uses Wayland in a
    Wayland session and xcb otherwise.
    """
    environ = os.environ if environ is None else environ
    platform = platform or sys.platform
    if not (platform.startswith("linux") or "bsd" in platform):
        return False
    choice = environ.get("QT_QPA_PLATFORM", "").strip()
    if choice:
        return "xcb" in [p.split(":", 1)[0].strip() for p in choice.split(";")]
    wayland = environ.get("XDG_SESSION_TYPE", "") == "wayland" and bool(environ.get("WAYLAND_DISPLAY"))
    return not wayland


@dataclass(frozen=True, slots=True)
class GuiProblem:
    """Why the window cannot open, worded for the user.

    Attributes:
        title: one line.
        text: the explanation and what to run (several lines).
        missing: the libraries that are missing (may be empty when unknown).
    """

    title: str
    text: str
    missing: tuple[SystemLibrary, ...] = ()


def _problem(missing: Sequence[SystemLibrary], detail: str = "") -> GuiProblem:
    names = ", ".join(lib.soname for lib in missing)
    lines = [
        "Tandem's window needs system libraries that are not installed: "
        f"{names or detail}.",
        "",
        "Install them with the line for your system, then start Tandem again:",
        "",
        *("  " + line for line in install_lines(missing)),
    ] if missing else [
        f"Tandem's window could not load Qt: {detail}.",
        "",
        "Install your distribution's Qt/X11 runtime libraries, or reinstall Tandem.",
    ]
    return GuiProblem("Tandem cannot open its window", "\n".join(lines), tuple(missing))


def gui_problem(environ: Mapping[str, str] | None = None,
                loader: Callable[[str], bool] | None = None,
                platform: str | None = None) -> GuiProblem | None:
    """None when the window can open here, else what is missing (see the module doc)."""
    if not needs_xcb(environ, platform):
        return None
    missing = missing_libraries(loader=loader)
    return _problem(missing) if missing else None


def import_problem(exc: ImportError) -> GuiProblem:
    """The problem behind ``import PySide6.QtGui`` failing (a missing system library)."""
    text = str(exc)
    m = re.search(r"(lib[\w.+-]+\.so[\d.]*)", text)
    lib = _BY_SONAME.get(m.group(1)) if m else None
    return _problem([lib] if lib else [], text)


Notifier = Callable[[str, str], None]


def _desktop_dialog(title: str, text: str) -> None:
    """Show ``text`` with the first desktop dialog tool that works (zenity, kdialog,
    xmessage, notify-send); silently nothing when none does."""
    if not (os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY")):
        return
    commands = [
        ["zenity", "--error", "--no-markup", f"--title={title}", f"--text={text}"],
        ["kdialog", "--title", title, "--error", text],
        ["xmessage", "-center", "-buttons", "OK", f"{title}\n\n{text}"],
        ["notify-send", "--urgency=critical", title, text],
    ]
    for cmd in commands:
        if shutil.which(cmd[0]) is None:
            continue
        try:
            # the dialog waits for the user's OK: that is the point of showing it
            if subprocess.run(cmd, check=False, capture_output=True).returncode in (0, 1):
                return
        except OSError:
            continue


def report_problem(problem: GuiProblem, notifier: Notifier | None = None) -> None:
    """Tell the user: on stderr, in the log, and — when not started from a terminal — in
    a desktop dialog (``notifier``; default: zenity/kdialog/xmessage/notify-send)."""
    print(f"{problem.title}\n\n{problem.text}", file=sys.stderr)
    log.error("%s: %s", problem.title, problem.text)
    if notifier is None:
        stderr_tty = getattr(sys.stderr, "isatty", lambda: False)()
        notifier = (lambda _t, _x: None) if stderr_tty else _desktop_dialog
    notifier(problem.title, problem.text)


def main(loader: Callable[[str], bool] | None = None) -> int:
    """Print which of Qt's system libraries are missing; 0 when none, 1 otherwise."""
    missing = missing_libraries(loader=loader)
    if not missing:
        print("Qt's system libraries for the window (X11/xcb) are installed.")
        return 0
    print(f"Qt's system libraries for the window (X11/xcb): {len(missing)} missing.\n")
    print(_problem(missing).text)
    return 1


if __name__ == "__main__":
    sys.exit(main())
