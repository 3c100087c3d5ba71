"""The bundle's library policy and Debian dependency mapping, on real files of this
environment (fast; the built bundle itself is checked in test_linux_bundle.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "packaging" / "linux"))
import bundle_libs  # noqa: E402
import make_packages  # noqa: E402

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ELF files")


def test_prune_keeps_what_is_reached_and_drops_the_rest() -> None:
    import PySide6

    qt = Path(PySide6.__file__).parent
    stdcxx = next((p for p in (Path("/usr/lib/x86_64-linux-gnu/libstdc++.so.6"),
                               Path("/lib/x86_64-linux-gnu/libstdc++.so.6")) if p.exists()), None)
    if stdcxx is None:
        pytest.skip("no libstdc++ at the Debian path")
    entries = [
        ("PySide6/QtCore.abi3.so", str(qt / "QtCore.abi3.so"), "EXTENSION"),
        ("PySide6/Qt/lib/libQt6Core.so.6", str(qt / "Qt/lib/libQt6Core.so.6"), "BINARY"),
        ("PySide6/Qt/lib/libQt6Pdf.so.6", str(qt / "Qt/lib/libQt6Pdf.so.6"), "BINARY"),
        ("libstdc++.so.6", str(stdcxx), "BINARY"),
        ("PySide6/Qt/plugins/platformthemes/libqgtk3.so",
         str(qt / "Qt/plugins/platformthemes/libqgtk3.so"), "BINARY"),
        ("PySide6/Qt/plugins/platforms/libqoffscreen.so",
         str(qt / "Qt/plugins/platforms/libqoffscreen.so"), "BINARY"),
    ]
    kept, report = bundle_libs.prune(entries)
    assert [e[0] for e in kept] == ["PySide6/QtCore.abi3.so", "PySide6/Qt/lib/libQt6Core.so.6",
                                    "PySide6/Qt/plugins/platforms/libqoffscreen.so"]
    assert report.unreachable == ["PySide6/Qt/lib/libQt6Pdf.so.6"]
    assert report.host_libraries == ["libstdc++.so.6"]
    assert report.unused_plugins == ["PySide6/Qt/plugins/platformthemes/libqgtk3.so"]
    datas = [("libQt6Pdf.so.6", "PySide6/Qt/lib/libQt6Pdf.so.6", "SYMLINK"),
             ("libQt6Core.so.6", "PySide6/Qt/lib/libQt6Core.so.6", "SYMLINK"),
             ("app/resources/x.json", "/src/x.json", "DATA")]
    assert [d[0] for d in bundle_libs.prune_symlinks(datas, kept)] == ["libQt6Core.so.6",
                                                                       "app/resources/x.json"]


def test_floor_of_a_folder(tmp_path: Path) -> None:
    import shutil

    import PySide6

    shutil.copy(Path(PySide6.__file__).parent / "Qt/lib/libQt6Core.so.6", tmp_path)
    floor = bundle_libs.symbol_floor(tmp_path)
    assert floor.glibc[1] == "libQt6Core.so.6" and floor.glibc[0].startswith("2.")
    assert floor.glibcxx is not None and floor.glibcxx[0].startswith("3.4.")


def test_debian_packages_from_dpkg_or_the_known_table(monkeypatch: pytest.MonkeyPatch) -> None:
    import shutil

    if shutil.which("dpkg") is None:
        pytest.skip("not a Debian-based host")
    assert make_packages.debian_packages({"libz.so.1"}) == ["zlib1g"]
    with monkeypatch.context() as mp:  # not monkeypatch.undo(): that undoes TANDEM_HOME too
        mp.setattr(make_packages, "_known_packages",
                   lambda: {"libtandem-fake.so.1": "libtandem-fake1"})
        assert make_packages.debian_packages({"libtandem-fake.so.1"}) == ["libtandem-fake1"]
        with pytest.raises(SystemExit, match="libunknown.so.3"):
            make_packages.debian_packages({"libunknown.so.3"})
    assert make_packages._known_packages()["libxcb-cursor.so.0"] == "libxcb-cursor0"
