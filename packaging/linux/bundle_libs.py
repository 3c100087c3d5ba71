"""Which shared libraries the Linux bundle carries, and the glibc floor that results.

PyInstaller collects every shared library that the collected extension modules and Qt
plugins link against, host system libraries included. Three kinds are left to the host
instead (:func:`prune`):

* **Qt plugins Tandem does not use** (:data:`UNUSED_QT_PLUGINS`): the GTK platform theme
  (it alone drags in GTK 3, GDK, cairo, pango, atk — Tandem draws with the Fusion style),
  the virtual keyboard (QtQuick/QML), the PDF image format (QtPdf), and the embedded-
  device platforms (EGLFS, linuxfb, VNC, Vulkan display).
* **Libraries every desktop provides and that must match the host**
  (:data:`HOST_LIBRARIES`): the C++ runtime (the build host's libstdc++ and libgcc_s ask
  for glibc 2.35–2.36 where the rest asks for less), libexpat (2.36), OpenSSL (the host's
  gets security updates), the display stack (X11/xcb, xkbcommon, EGL/GL, DRM, Wayland:
  they must match the host's X server, compositor and GPU driver), fontconfig/freetype
  (fontconfig reads the host's configuration files), D-Bus and GLib (GLib loads the host's
  GIO modules, built against the host's GLib).
* **Libraries nothing needs any more** once the above are gone: a library that PyInstaller
  collected as a dependency (top level of the bundle, ``PySide6/Qt/lib``, ``*.libs``) is
  kept only if an extension module, a Qt plugin, llama.cpp or the interpreter reaches it
  through ``DT_NEEDED``.

:func:`symbol_floor` then reads the ``GLIBC_*`` / ``GLIBCXX_*`` symbol versions that every
ELF file in a built bundle requires (``.gnu.version_r``, read with pyelftools): the
highest is the oldest glibc (and libstdc++) the bundle runs on. Run as a script on a
built bundle folder to print it (``python packaging/linux/bundle_libs.py dist/tandem``).
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Qt plugins left out (paths relative to PySide6/Qt/plugins), with the reason
UNUSED_QT_PLUGINS: dict[str, str] = {
    "platformthemes/libqgtk3.so": "GTK 3 theme: pulls GTK, GDK, cairo, pango; Tandem uses Fusion",
    "platforminputcontexts/libqtvirtualkeyboardplugin.so": "on-screen keyboard: needs QtQuick/QML",
    "imageformats/libqpdf.so": "PDF as an image format: needs QtPdf",
    "platforms/libqeglfs.so": "embedded EGL full-screen platform",
    "platforms/libqlinuxfb.so": "embedded framebuffer platform",
    "platforms/libqvnc.so": "VNC server platform",
    "platforms/libqvkkhrdisplay.so": "Vulkan display platform",
    "platforms/libqminimalegl.so": "headless EGL platform",
    "egldeviceintegrations/*": "EGLFS device integrations",
    "generic/libqtuiotouchplugin.so": "TUIO touch events over the network: needs QtNetwork",
    "networkinformation/*": "network status: Tandem does not use QtNetwork",
    "tls/*": "TLS for QtNetwork: Tandem downloads with Python's ssl",
}

#: Sonames taken from the host (shell patterns), with the reason
HOST_LIBRARIES: dict[str, str] = {
    "libstdc++.so.6": "C++ runtime; the build host's raises the floor to glibc 2.36",
    "libgcc_s.so.1": "GCC runtime; the build host's raises the floor to glibc 2.35",
    "libexpat.so.1": "every system has it; the build host's raises the floor to glibc 2.36",
    "libcrypto.so.*": "OpenSSL: the host's gets security updates",
    "libssl.so.*": "OpenSSL: the host's gets security updates",
    "libX*.so.*": "X11 client libraries: must match the host's display stack",
    "libxcb*.so.*": "X11 (xcb): must match the host's display stack",
    "libxkbcommon*.so.*": "keyboard layouts: must match the host's",
    "libEGL.so.*": "GL dispatch: must match the host's GPU driver",
    "libGL*.so.*": "GL dispatch: must match the host's GPU driver",
    "libOpenGL.so.*": "GL dispatch: must match the host's GPU driver",
    "libdrm.so.*": "kernel graphics interface: must match the host's driver",
    "libgbm.so.*": "GPU buffers: must match the host's driver",
    "libwayland-*.so.*": "Wayland client: must match the host's compositor",
    "libfontconfig.so.*": "reads the host's font configuration files",
    "libfreetype.so.*": "paired with the host's fontconfig",
    "libdbus-1.so.*": "talks to the host's message bus",
    "libglib-2.0.so.*": "GLib loads the host's GIO modules",
    "libgobject-2.0.so.*": "GLib (see libglib)",
    "libgio-2.0.so.*": "GLib (see libglib)",
    "libgmodule-2.0.so.*": "GLib (see libglib)",
    "libgthread-2.0.so.*": "GLib (see libglib)",
}

#: loaded by PyInstaller's bootloader with dlopen, so no DT_NEEDED points at it
ALWAYS_KEEP = ("libpython*.so*",)

#: where PyInstaller puts libraries it collected only as dependencies of others
_DEPENDENCY_DIRS = (".", "PySide6/Qt/lib")


def _matches(name: str, patterns: Iterable[str]) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in patterns)


def is_unused_plugin(dest: str) -> bool:
    """Whether a bundle path is one of :data:`UNUSED_QT_PLUGINS`."""
    marker = "PySide6/Qt/plugins/"
    if marker not in dest:
        return False
    return _matches(dest.split(marker, 1)[1], UNUSED_QT_PLUGINS)


def is_host_library(dest: str) -> bool:
    """Whether a bundle path names one of :data:`HOST_LIBRARIES`."""
    return _matches(Path(dest).name, HOST_LIBRARIES)


def _is_dependency_only(entry: Entry) -> bool:
    """A library PyInstaller collected only because another links it (so it may go)."""
    dest, _src, typecode = entry[0], entry[1], entry[2] if len(entry) > 2 else "BINARY"
    name = Path(dest).name
    if typecode == "EXTENSION" or _matches(name, ("*.cpython-*.so", "*.abi3.so", *ALWAYS_KEEP)):
        return False
    parent = Path(dest).parent.as_posix()
    return parent in _DEPENDENCY_DIRS or parent.endswith(".libs")


def needed(path: str | Path) -> list[str]:
    """The ``DT_NEEDED`` sonames of an ELF file ([] for anything else)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.dynamic import DynamicSection
    from elftools.elf.elffile import ELFFile

    try:
        with open(path, "rb") as f:
            if f.read(4) != b"\x7fELF":
                return []
            f.seek(0)
            elf = ELFFile(f)
            out: list[str] = []
            for section in elf.iter_sections():
                if isinstance(section, DynamicSection):
                    out += [t.needed for t in section.iter_tags() if t.entry.d_tag == "DT_NEEDED"]
            return out
    except (OSError, ELFError):
        return []


Entry = Any  # a PyInstaller TOC entry: (dest_name, src_path, typecode)


@dataclass
class PruneReport:
    """What :func:`prune` left out, by reason (bundle paths)."""

    unused_plugins: list[str]
    host_libraries: list[str]
    unreachable: list[str]

    def to_dict(self) -> dict[str, list[str]]:
        return {"unused_qt_plugins": self.unused_plugins, "host_libraries": self.host_libraries,
                "unreachable": self.unreachable}


def prune(binaries: Sequence[Entry]) -> tuple[list[Entry], PruneReport]:
    """Drop unused Qt plugins, host libraries, and dependency-only libraries that nothing
    kept reaches. Returns the kept entries (in order) and what was dropped."""
    report = PruneReport([], [], [])
    kept: list[Entry] = []
    for entry in binaries:
        dest = entry[0]
        if is_unused_plugin(dest):
            report.unused_plugins.append(dest)
        elif is_host_library(dest):
            report.host_libraries.append(dest)
        else:
            kept.append(entry)
    roots = [e for e in kept if not _is_dependency_only(e)]
    deps = {Path(e[0]).name: e for e in kept if e not in roots}
    reached: set[str] = set()
    todo = [e[1] for e in roots]
    while todo:
        for soname in needed(todo.pop()):
            if soname in deps and soname not in reached:
                reached.add(soname)
                todo.append(deps[soname][1])
    result = []
    for entry in kept:
        if entry in roots or Path(entry[0]).name in reached:
            result.append(entry)
        else:
            report.unreachable.append(entry[0])
    return result, report


def prune_symlinks(datas: Sequence[Entry], binaries: Sequence[Entry]) -> list[Entry]:
    """Drop PyInstaller's ``SYMLINK`` entries (top-level links to libraries in
    subfolders) whose target :func:`prune` removed, so no link dangles."""
    kept = {Path(e[0]).as_posix() for e in binaries}
    out = []
    for entry in datas:
        if len(entry) > 2 and entry[2] == "SYMLINK":
            target = (Path(entry[0]).parent / entry[1]).as_posix()
            if target not in kept:
                continue
        out.append(entry)
    return out


# -- the floor of a built bundle -------------------------------------------------------
def _version(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".") if x.isdigit())


@dataclass(frozen=True)
class Floor:
    """The newest symbol versions any file of a bundle asks for.

    Attributes:
        glibc: the highest ``GLIBC_x.y`` (``"2.35"``), and the file that needs it.
        glibcxx: the highest ``GLIBCXX_3.4.n``, and the file, or None if no C++.
    """

    glibc: tuple[str, str]
    glibcxx: tuple[str, str] | None


def symbol_floor(folder: Path) -> Floor:
    """Read every ELF file under ``folder`` and return the highest GLIBC and GLIBCXX
    symbol versions required (``.gnu.version_r``)."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile
    from elftools.elf.gnuversions import GNUVerNeedSection

    best: dict[str, tuple[tuple[int, ...], str, str]] = {}
    for path in sorted(folder.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        try:
            with open(path, "rb") as f:
                if f.read(4) != b"\x7fELF":
                    continue
                f.seek(0)
                elf = ELFFile(f)
                for section in elf.iter_sections():
                    if not isinstance(section, GNUVerNeedSection):
                        continue
                    for _verneed, auxiliaries in section.iter_versions():
                        for aux in auxiliaries:
                            for prefix in ("GLIBC_", "GLIBCXX_"):
                                rest = aux.name[len(prefix):]
                                if aux.name.startswith(prefix) and rest[:1].isdigit():
                                    v = _version(rest)
                                    if v > best.get(prefix, ((), "", ""))[0]:
                                        best[prefix] = (v, rest, str(path.relative_to(folder)))
        except (OSError, ELFError):
            continue
    glibc = best.get("GLIBC_")
    cxx = best.get("GLIBCXX_")
    return Floor(glibc=(glibc[1], glibc[2]) if glibc else ("none", ""),
                 glibcxx=(cxx[1], cxx[2]) if cxx else None)


def main(argv: Sequence[str]) -> int:
    if len(argv) != 1:
        print("usage: bundle_libs.py BUNDLE_FOLDER", file=sys.stderr)
        return 2
    floor = symbol_floor(Path(argv[0]))
    print(json.dumps({"glibc": floor.glibc[0], "glibc_needed_by": floor.glibc[1],
                      "glibcxx": floor.glibcxx[0] if floor.glibcxx else None,
                      "glibcxx_needed_by": floor.glibcxx[1] if floor.glibcxx else None}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
