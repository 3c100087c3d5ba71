"""Pack a frozen Tandem (PyInstaller's ``tandem/`` folder) as a ``.deb`` and a tarball.

Called by ``packaging/build_linux.sh`` with the project's Python, after PyInstaller:

    python packaging/linux/make_packages.py --bundle DIST/tandem --out OUT

What it adds to the bundle folder: a ``tandem-cli`` link to ``tandem`` (the frozen app
runs its CLI when invoked by that name, :mod:`app.entry`) and ``licenses/`` (Tandem's
licence, the third-party notices, the LGPL-3.0 and GPL-3.0 texts, and the licence files
of every bundled Python distribution with ``PACKAGES.txt``). Then, from one staged tree:

* ``tandem_<version>_<arch>.deb`` (``dpkg-deb --root-owner-group``): the bundle in
  ``/opt/tandem``, ``/usr/bin/tandem`` and ``/usr/bin/tandem-cli``, the desktop entry,
  icons (48 px, 256 px, SVG), AppStream metainfo and MIME type under ``/usr/share``, and
  ``/usr/share/doc/tandem/copyright``. ``Depends`` lists the glibc floor measured from the
  bundled files (:func:`bundle_libs.symbol_floor`) and the packages that provide every
  library the bundle links against but does not carry, found with ``dpkg -S`` on this
  Debian-based build host. Debian's own file triggers refresh the menu, MIME and icon
  caches, so the package has no maintainer scripts.
* ``tandem-<version>-linux-<arch>.tar.gz``: the bundle, the same ``share/`` tree and an
  ``install.sh`` that installs into ``~/.local`` (or ``--prefix``) and checks Qt's
  system libraries.

Prints one JSON line with the files, their sizes (bytes) and the floor.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tarfile
from importlib import metadata
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(HERE))

from bundle_libs import symbol_floor  # noqa: E402

from app import __version__  # noqa: E402
from app.launcher import APP_ID, desktop_entry  # noqa: E402

#: sonames the C library provides (libc6): covered by the glibc floor
GLIBC_SONAMES = {"libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1",
                 "libresolv.so.2", "libutil.so.1", "ld-linux-x86-64.so.2",
                 "ld-linux-aarch64.so.1", "libanl.so.1"}
#: Debian packages renamed for 64-bit time_t (Ubuntu 24.04, Debian 13): either will do
T64_ALTERNATIVES = {"libssl3": "libssl3t64", "libglib2.0-0": "libglib2.0-0t64"}
#: GLIBCXX symbol version → the GCC release whose libstdc++ first has it
GLIBCXX_GCC = {(3, 4, 28): 10, (3, 4, 29): 11, (3, 4, 30): 12, (3, 4, 31): 13, (3, 4, 32): 14,
               (3, 4, 33): 14}
DEB_ARCH = {"x86_64": "amd64", "aarch64": "arm64"}


def _run(cmd: list[str], **kw: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, check=True, text=True, capture_output=True, **kw)  # type: ignore[call-overload]


def runtime_distributions(root: str = "tandem-chat") -> list[metadata.Distribution]:
    """Tandem and every distribution it depends on at run time (no extras), installed."""
    seen: dict[str, metadata.Distribution] = {}
    todo = [root]
    while todo:
        name = todo.pop()
        key = re.sub(r"[-_.]+", "-", name).lower()
        if key in seen:
            continue
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue
        seen[key] = dist
        for req in dist.requires or []:
            if "extra ==" in req:
                continue
            if ";" in req:
                from packaging.markers import Marker  # shipped with pip's vendor too

                if not Marker(req.split(";", 1)[1]).evaluate():
                    continue
            todo.append(re.split(r"[\s<>=!~;\[(]", req.strip(), maxsplit=1)[0])
    return sorted(seen.values(), key=lambda d: d.metadata["Name"].lower())


def _license_of(dist: metadata.Distribution) -> str:
    md = dist.metadata
    expr = md.get("License-Expression")
    if expr:
        return expr
    text = (md.get("License") or "").strip()
    if text and len(text) < 80 and "\n" not in text:
        return text
    classifiers = [c.split(" :: ")[-1] for c in md.get_all("Classifier") or [] if c.startswith("License ::")]
    return "; ".join(classifiers) or "see the licence files"


def write_licenses(bundle: Path) -> Path:
    """``<bundle>/licenses``: Tandem's licence and notices, LGPL/GPL texts, and each
    bundled distribution's licence files with a ``PACKAGES.txt`` index."""
    out = bundle / "licenses"
    if out.exists():
        shutil.rmtree(out)
    out.mkdir()
    shutil.copy(ROOT / "LICENSE", out / "LICENSE")
    shutil.copy(ROOT / "THIRD_PARTY_NOTICES.md", out / "THIRD_PARTY_NOTICES.md")
    common = Path("/usr/share/common-licenses")
    # LGPL/GPL: Qt and PySide6; Apache-2.0: the SmolLM2 demo model
    for name, target in (("LGPL-3", "LGPL-3.0.txt"), ("GPL-3", "GPL-3.0.txt"),
                         ("Apache-2.0", "Apache-2.0.txt")):
        if not (common / name).is_file():
            raise SystemExit(f"{common / name} is missing: install Debian's base-files "
                             "(the Qt/PySide6 and demo model licence texts are copied from there)")
        shutil.copy(common / name, out / target)
    index = ["Python distributions in this bundle (name, version, declared licence):", ""]
    for dist in runtime_distributions():
        name = dist.metadata["Name"]
        index.append(f"{name} {dist.version}: {_license_of(dist)}")
        files = [f for f in dist.files or []
                 if ".dist-info/" in str(f) and re.search(r"(?i)(licen[cs]e|copying|notice|authors)", f.name)]
        for f in files:
            src = Path(str(dist.locate_file(f)))
            if src.is_file():
                dest = out / name / f.name
                if dest.exists():
                    dest = out / name / f"{f.parent.name}-{f.name}"
                dest.parent.mkdir(exist_ok=True)
                shutil.copy(src, dest)
    (out / "PACKAGES.txt").write_text("\n".join(index) + "\n", encoding="utf-8")
    return out


def host_sonames(bundle: Path) -> set[str]:
    """Sonames the bundle's ELF files need but it does not carry (the host's)."""
    from bundle_libs import needed

    carried = {p.name for p in bundle.rglob("*.so*")}
    wanted: set[str] = set()
    for path in bundle.rglob("*"):
        if path.is_file() and not path.is_symlink():
            wanted.update(needed(path))
    return {s for s in wanted - carried if s not in GLIBC_SONAMES}


def _known_packages() -> dict[str, str]:
    """soname → Debian package for libraries a build host may lack (a minimal image has
    no X11 runtime): Qt's xcb set from :mod:`app.system_libs`, and the Wayland client."""
    from app.system_libs import QT_XCB_LIBRARIES

    known = {lib.soname: lib.apt for lib in QT_XCB_LIBRARIES}
    known.update({"libwayland-client.so.0": "libwayland-client0",
                  "libwayland-cursor.so.0": "libwayland-cursor0",
                  "libwayland-egl.so.1": "libwayland-egl1", "libxcb-glx.so.0": "libxcb-glx0"})
    return known


def debian_packages(sonames: set[str]) -> list[str]:
    """The Debian packages that ship ``sonames``: asked of dpkg (``dpkg -S``) where the
    library is installed on this host, else from :func:`_known_packages`.

    Raises:
        SystemExit: a library is neither installed here nor known.
    """
    packages: set[str] = set()
    missing = []
    known = _known_packages()
    for soname in sorted(sonames):
        found = None
        for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib/aarch64-linux-gnu",
                  "/usr/lib/aarch64-linux-gnu", "/lib", "/usr/lib", "/lib64", "/usr/lib64"):
            if (Path(d) / soname).exists():
                found = Path(d) / soname
                break
        if found is None:
            if soname in known:
                packages.add(known[soname])
            else:
                missing.append(soname)
            continue
        try:
            owner = _run(["dpkg", "-S", str(found)]).stdout
        except (OSError, subprocess.CalledProcessError):
            try:  # merged /usr: dpkg knows the file under the other prefix
                alt = str(found)[4:] if str(found).startswith("/usr/") else "/usr" + str(found)
                owner = _run(["dpkg", "-S", alt]).stdout
            except (OSError, subprocess.CalledProcessError):
                if soname in known:
                    packages.add(known[soname])
                else:
                    missing.append(soname)
                continue
        packages.add(owner.split(":", 1)[0].strip())
    if missing:
        raise SystemExit("cannot tell which Debian package ships " + ", ".join(missing)
                         + " (install it on the build host, or name it in _known_packages)")
    return sorted(packages)


def depends_field(bundle: Path) -> tuple[str, dict[str, object]]:
    """The ``Depends:`` value and the measured floor."""
    floor = symbol_floor(bundle)
    deps = [f"libc6 (>= {floor.glibc[0]})"]
    if floor.glibcxx is not None:
        v = tuple(int(x) for x in floor.glibcxx[0].split("."))
        gcc = GLIBCXX_GCC.get(v)  # type: ignore[arg-type]
        deps.append(f"libstdc++6 (>= {gcc})" if gcc else "libstdc++6")
    recommends = []
    for pkg in debian_packages(host_sonames(bundle)):
        if pkg in ("libc6", "libstdc++6"):
            continue
        if pkg.startswith("libwayland-"):  # only Qt's Wayland plugin; without it Qt uses X11
            recommends.append(pkg)
            continue
        base = pkg.removesuffix("t64")
        alt = T64_ALTERNATIVES.get(base)
        deps.append(f"{base} | {alt}" if alt else pkg)
    info = {"glibc": floor.glibc[0], "glibc_needed_by": floor.glibc[1],
            "glibcxx": floor.glibcxx[0] if floor.glibcxx else None,
            "recommends": ", ".join(recommends)}
    return ", ".join(dict.fromkeys(deps)), info


def stage_share(share: Path, exec_name: str) -> None:
    """The freedesktop files under ``share`` (``applications``, ``icons``, ``metainfo``,
    ``mime``), with ``Exec=<exec_name> %f``."""
    res = ROOT / "resources"
    files = {
        share / "applications" / f"{APP_ID}.desktop": None,
        share / "icons/hicolor/48x48/apps" / f"{APP_ID}.png": res / "icons/tandem-48.png",
        share / "icons/hicolor/256x256/apps" / f"{APP_ID}.png": res / "icons/tandem-256.png",
        share / "icons/hicolor/scalable/apps" / f"{APP_ID}.svg": res / "icons/tandem.svg",
        share / "metainfo" / f"{APP_ID}.metainfo.xml": res / f"launchers/{APP_ID}.metainfo.xml",
        share / "mime/packages" / f"{APP_ID}.xml": res / "launchers/gguf-mime.xml",
    }
    for dest, src in files.items():
        dest.parent.mkdir(parents=True, exist_ok=True)
        if src is None:
            dest.write_text(desktop_entry([exec_name]), encoding="utf-8")
        else:
            shutil.copy(src, dest)
        dest.chmod(0o644)


COPYRIGHT = """Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/
Upstream-Name: Tandem
Comment: The bundle in /opt/tandem carries third-party software and the
 SmolLM2-135M-Instruct demo model; their notices and licence texts are in /opt/tandem/licenses
 (THIRD_PARTY_NOTICES.md, PACKAGES.txt, one folder per Python distribution).

Files: *
Copyright: 2026 The Tandem developers
License: MIT

Files: opt/tandem/_internal/llama_cpp/*
Copyright: 2023-2026 The ggml authors; 2023 Andrei Betlen
License: MIT

Files: opt/tandem/_internal/PySide6/* opt/tandem/_internal/shiboken6/*
Copyright: The Qt Company Ltd. and other contributors
License: LGPL-3.0-only
 On Debian systems the full text is in /usr/share/common-licenses/LGPL-3.

Files: opt/tandem/_internal/models/SmolLM2-135M-Instruct.Q4_1.gguf
Copyright: 2024 Hugging Face
License: Apache-2.0
 On Debian systems the full text is in /usr/share/common-licenses/Apache-2.0.

License: MIT
{mit}
"""


def _link_tree(src: Path, dest: Path) -> None:
    """Copy a tree as hard links (same file system) or, failing that, as copies."""
    def link(a: str, b: str) -> None:
        try:
            os.link(a, b)
        except OSError:
            shutil.copy2(a, b)

    shutil.copytree(src, dest, symlinks=True, copy_function=link)


def build_deb(bundle: Path, out: Path, depends: str, recommends: str, arch: str) -> Path:
    root = out / "deb-root"
    if root.exists():
        shutil.rmtree(root)
    _link_tree(bundle, root / "opt" / "tandem")
    (root / "usr" / "bin").mkdir(parents=True)
    for name in ("tandem", "tandem-cli"):
        os.symlink("/opt/tandem/tandem", root / "usr" / "bin" / name)
    stage_share(root / "usr" / "share", "tandem")
    doc = root / "usr" / "share" / "doc" / "tandem"
    doc.mkdir(parents=True)
    mit = "\n".join(" " + (line if line.strip() else ".") for line in
                    (ROOT / "LICENSE").read_text().splitlines()[2:])
    (doc / "copyright").write_text(COPYRIGHT.format(mit=mit), encoding="utf-8")
    size_kib = sum(p.stat().st_size for p in root.rglob("*") if p.is_file() and not p.is_symlink()) // 1024
    (root / "DEBIAN").mkdir()
    (root / "DEBIAN" / "control").write_text(
        f"Package: tandem\nVersion: {__version__}\nArchitecture: {arch}\n"
        "Maintainer: The Tandem developers <maintainers@tandem.invalid>\n"
        f"Installed-Size: {size_kib}\nDepends: {depends}\n"
        + (f"Recommends: {recommends}\n" if recommends else "") +
        "Section: utils\nPriority: optional\n"
        "Description: chat with GGUF language models on this computer\n"
        " Tandem runs GGUF models locally through llama.cpp, built around speculative\n"
        " decoding: it shows live how well a drafter's guesses are accepted and what\n"
        " that does to the speed. Includes the SmolLM2 135M Instruct demo model.\n",
        encoding="utf-8")
    for d in [root, *root.rglob("*")]:
        if d.is_dir() and not d.is_symlink():
            d.chmod(0o755)
    deb = out / f"tandem_{__version__}_{arch}.deb"
    # gzip, which every dpkg reads; quantized weights hardly shrink with any compressor
    # (Gemma 3 270M's Q4_K_M: 6 %, measured), so a stronger one would buy little
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)])
    shutil.rmtree(root)
    return deb


def build_tarball(bundle: Path, out: Path, machine: str) -> Path:
    name = f"tandem-{__version__}-linux-{machine}"
    stage = out / name
    if stage.exists():
        shutil.rmtree(stage)
    _link_tree(bundle, stage / "tandem")
    stage_share(stage / "share", "tandem")
    shutil.copy(HERE / "install-tarball.sh", stage / "install.sh")
    (stage / "install.sh").chmod(0o755)
    for f in ("LICENSE", "THIRD_PARTY_NOTICES.md"):
        shutil.copy(ROOT / f, stage / f)
    (stage / "README.txt").write_text(
        f"Tandem {__version__} for Linux ({machine})\n\n"
        "Install for this user (into ~/.local):   ./install.sh\n"
        "Install elsewhere:                       ./install.sh --prefix /opt/local\n"
        "Remove:                                  ./install.sh --uninstall [--prefix DIR]\n"
        "Run without installing:                  ./tandem/tandem   (the CLI: ./tandem/tandem-cli)\n",
        encoding="utf-8")
    tar = out / f"{name}.tar.gz"
    with tarfile.open(tar, "w:gz", compresslevel=6) as tf:
        tf.add(stage, arcname=name)
    shutil.rmtree(stage)
    return tar


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bundle", type=Path, required=True, help="PyInstaller's tandem/ folder")
    ap.add_argument("--out", type=Path, required=True, help="where the .deb and tarball go")
    args = ap.parse_args(argv)
    bundle: Path = args.bundle.resolve()
    out: Path = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    cli = bundle / "tandem-cli"
    if not cli.is_symlink():
        os.symlink("tandem", cli)
    write_licenses(bundle)
    machine = platform.machine()
    depends, floor = depends_field(bundle)
    deb = build_deb(bundle, out, depends, str(floor["recommends"]), DEB_ARCH.get(machine, machine))
    tar = build_tarball(bundle, out, machine)
    bundle_bytes = sum(p.stat().st_size for p in bundle.rglob("*") if p.is_file() and not p.is_symlink())
    print(json.dumps({"bundle": str(bundle), "bundle_bytes": bundle_bytes,
                      "deb": str(deb), "deb_bytes": deb.stat().st_size,
                      "tarball": str(tar), "tarball_bytes": tar.stat().st_size,
                      "depends": depends, **floor}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
