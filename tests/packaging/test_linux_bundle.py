"""The Linux bundle from ``packaging/build_linux.sh``: what the .deb and the tarball
contain, the glibc floor of what is bundled, and a smoke test of the frozen app
offscreen (starts, ``--version``, its CLI, a few tokens from the bundled demo model, a
broken GGUF refused through the probe, a GGUF given on the command line)."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from app import __version__
from app.launcher import APP_ID
from tests.packaging.conftest import REPO, clean_env, run_until_logged

# builds take minutes, more on a busy machine: beyond the suite's 600 s default
pytestmark = [pytest.mark.packaging, pytest.mark.timeout(3600)]

sys.path.insert(0, str(REPO / "packaging" / "linux"))
import bundle_libs  # noqa: E402

#: the floor README.md documents (Ubuntu 22.04 has glibc 2.35 and GCC 12's libstdc++)
DOCUMENTED_GLIBC = (2, 35)
DOCUMENTED_GLIBCXX = (3, 4, 29)

SHARE_FILES = [
    f"applications/{APP_ID}.desktop",
    f"icons/hicolor/48x48/apps/{APP_ID}.png",
    f"icons/hicolor/256x256/apps/{APP_ID}.png",
    f"icons/hicolor/scalable/apps/{APP_ID}.svg",
    f"metainfo/{APP_ID}.metainfo.xml",
    f"mime/packages/{APP_ID}.xml",
]


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split("."))


def test_floor_is_the_documented_one_and_no_host_library_is_bundled(linux_bundle: dict) -> None:
    bundle: Path = linux_bundle["bundle"]
    floor = bundle_libs.symbol_floor(bundle)
    assert _v(floor.glibc[0]) <= DOCUMENTED_GLIBC, floor
    assert floor.glibcxx is not None and _v(floor.glibcxx[0]) <= DOCUMENTED_GLIBCXX, floor
    readme = (REPO / "README.md").read_text()
    assert "glibc 2.35" in readme and "GLIBCXX_3.4.29" in readme
    names = [p.name for p in bundle.rglob("*.so*")]
    host = [n for n in names if bundle_libs.is_host_library(n)]
    assert host == [], host
    assert not [n for n in names if n.startswith(("libgtk", "libgdk", "libcairo", "libQt6Quick",
                                                  "libQt6Network", "libreadline"))]
    assert not [p for p in bundle.rglob("*") if p.is_symlink() and not p.exists()]  # no dangling links
    print(f"\nfloor: glibc {floor.glibc}, GLIBCXX {floor.glibcxx}")


def test_deb_contents_and_depends(linux_bundle: dict) -> None:
    deb: Path = linux_bundle["deb"]
    fields = {}
    for key in ("Package", "Version", "Architecture", "Depends", "Installed-Size"):
        fields[key] = subprocess.run(["dpkg-deb", "-f", str(deb), key], capture_output=True,
                                     text=True, check=True).stdout.strip()
    assert fields["Package"] == "tandem" and fields["Version"] == __version__
    depends = fields["Depends"]
    assert f"libc6 (>= {DOCUMENTED_GLIBC[0]}.{DOCUMENTED_GLIBC[1]})" in depends
    for pkg in ("libstdc++6", "libxcb-cursor0", "libxcb-icccm4", "libxcb-keysyms1", "libegl1",
                "libxkbcommon-x11-0", "libfontconfig1", "libssl3 | libssl3t64"):
        assert pkg in depends, (pkg, depends)
    listing = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True,
                             check=True).stdout
    paths = {line.split()[5].lstrip(".") for line in listing.splitlines()}
    for f in SHARE_FILES:
        assert f"/usr/share/{f}" in paths, f
    for f in ("/usr/bin/tandem", "/usr/bin/tandem-cli", "/opt/tandem/tandem", "/usr/share/doc/tandem/copyright",
              "/opt/tandem/licenses/THIRD_PARTY_NOTICES.md", "/opt/tandem/licenses/LGPL-3.0.txt",
              "/opt/tandem/licenses/PACKAGES.txt", "/opt/tandem/licenses/Apache-2.0.txt",
              "/opt/tandem/_internal/models/SmolLM2-135M-Instruct.Q4_1.gguf"):
        assert f in paths, f
    assert "root/root" in listing and not [ln for ln in listing.splitlines() if "root/root" not in ln]
    report = linux_bundle["report"]
    print(f"\nbundle {report['bundle_bytes'] / 1e6:.0f} MB, .deb {report['deb_bytes'] / 1e6:.0f} MB, "
          f"tarball {report['tarball_bytes'] / 1e6:.0f} MB")


def test_deb_desktop_files_validate(linux_bundle: dict, tmp_path: Path) -> None:
    subprocess.run(["dpkg-deb", "-x", str(linux_bundle["deb"]), str(tmp_path)], check=True)
    share = tmp_path / "usr" / "share"
    out = subprocess.run(["desktop-file-validate", str(share / SHARE_FILES[0])], capture_output=True, text=True)
    assert out.returncode == 0 and out.stdout + out.stderr == "", out.stdout + out.stderr
    assert "Exec=tandem %f\n" in (share / SHARE_FILES[0]).read_text()
    out = subprocess.run(["appstreamcli", "validate", "--no-net", str(share / SHARE_FILES[4])],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "Validation was successful." in out.stdout, out.stdout
    notices = (tmp_path / "opt/tandem/licenses/THIRD_PARTY_NOTICES.md").read_text()
    assert "SmolLM2-135M-Instruct" in notices and "Apache License 2.0" in notices
    assert "Gemma is provided under and subject to the Gemma Terms of Use" in notices  # the extra
    assert "LGPL-3.0" in notices and "The ggml authors" in notices
    packages = (tmp_path / "opt/tandem/licenses/PACKAGES.txt").read_text()
    assert "llama_cpp_python 0.3" in packages and "PySide6" in packages


def test_tarball_installs_and_uninstalls(linux_bundle: dict, tmp_path: Path) -> None:
    with tarfile.open(linux_bundle["tarball"]) as tf:
        tf.extractall(tmp_path / "unpacked", filter="tar")
    [top] = (tmp_path / "unpacked").iterdir()
    prefix = tmp_path / "my prefix"
    home = tmp_path / "home"
    env = clean_env(home)
    out = subprocess.run(["sh", str(top / "install.sh"), "--prefix", str(prefix)], capture_output=True,
                         text=True, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Tandem is installed" in out.stdout and "Qt's system libraries" in out.stdout
    for f in SHARE_FILES:
        assert (prefix / "share" / f).is_file(), f
    entry = (prefix / "share" / SHARE_FILES[0]).read_text()
    assert f'Exec="{prefix}/bin/tandem" %f' in entry
    check = subprocess.run(["desktop-file-validate", str(prefix / "share" / SHARE_FILES[0])],
                           capture_output=True, text=True)
    assert check.returncode == 0 and check.stdout == "", check.stdout
    version = subprocess.run([str(prefix / "bin" / "tandem-cli"), "--version"], capture_output=True,
                             text=True, env=env, timeout=120)
    assert version.stdout.strip() == f"Tandem {__version__}", version.stderr
    out = subprocess.run(["sh", str(top / "install.sh"), "--uninstall", "--prefix", str(prefix)],
                         capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 0 and not (prefix / "lib" / "tandem").exists()
    assert not any((prefix / "share" / f).exists() for f in SHARE_FILES)


def _frozen(linux_bundle: dict, name: str = "tandem") -> str:
    return str(linux_bundle["bundle"] / name)


def test_frozen_version_and_help_stay_on_the_command_line(linux_bundle: dict, tmp_path: Path) -> None:
    env = clean_env(tmp_path / "home")
    out = subprocess.run([_frozen(linux_bundle), "--version"], capture_output=True, text=True,
                         env=env, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == f"Tandem {__version__}"
    for exe, args, usage in (("tandem", ["--help"], "usage: tandem "),
                             ("tandem-cli", [], "usage: tandem-cli "),
                             ("tandem-cli", ["models", "pair", "--help"], "usage: tandem-cli models pair ")):
        out = subprocess.run([_frozen(linux_bundle, exe), *args], capture_output=True, text=True,
                             env=env, timeout=120)
        assert (out.stdout + out.stderr).startswith(usage), (exe, args, out.stdout, out.stderr)
    assert not (tmp_path / "home" / "logs" / "tandem.log").exists()  # no window was opened


def test_frozen_generates_with_the_bundled_demo(linux_bundle: dict, tmp_path: Path) -> None:
    demo = linux_bundle["bundle"] / "_internal" / "models" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    out = subprocess.run([_frozen(linux_bundle, "tandem-cli"), "generate", "--model", str(demo),
                          "--chat", "--prompt-lookup", "--max-tokens", "4", "--n-ctx", "256", "--json",
                          "-"], input="Say hello.", capture_output=True, text=True,
                         env=clean_env(tmp_path / "home"), timeout=600)
    assert out.returncode == 0, out.stderr
    reply = json.loads(out.stdout)
    assert reply["schema_version"] == 1 and reply["stats"]["mode"] == "prompt-lookup"
    assert reply["finish_reason"] in ("length", "stop") and 0 < len(reply["token_ids"]) <= 4
    assert reply["text"].strip()


def test_frozen_refuses_a_broken_gguf_through_its_probe(linux_bundle: dict, tmp_path: Path) -> None:
    from tests.synthetic import write_tiny_llama

    broken = write_tiny_llama(tmp_path / "no-layers.gguf", n_layer=0)  # llama.cpp aborts on it
    out = subprocess.run([_frozen(linux_bundle, "tandem-cli"), "generate", "--model", str(broken), "hi"],
                         capture_output=True, text=True, env=clean_env(tmp_path / "home"), timeout=600)
    assert out.returncode == 2, out.stderr  # a clean refusal, not SIGABRT (-6 / 134)
    assert "cannot use this file" in out.stderr and "n_layer" in out.stderr  # the probe's reason
    assert "Traceback" not in out.stderr and len(out.stderr.strip().splitlines()) == 1


def test_frozen_window_opens_a_gguf_from_its_command_line(linux_bundle: dict, tiny_target: Path,
                                                         tmp_path: Path) -> None:
    home = tmp_path / "home"
    status, err, log = run_until_logged([_frozen(linux_bundle), str(tiny_target)],
                                        home / "logs" / "tandem.log",
                                        ["window shown", f"model loaded: {tiny_target}"],
                                        clean_env(home), tmp_path)
    assert status == 0, err
    assert "Traceback" not in log and "(frozen app)" in log and "Qt: PySide6 6." in log
    assert "exit with status 0" in log
