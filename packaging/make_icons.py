"""Render resources/icons/tandem.svg into the PNG, ICO and ICNS files the launchers use.

Run after editing the SVG:  .venv/bin/python packaging/make_icons.py
(Qt is used here only as an SVG renderer; it is a build step, not part of the app.)
"""

from __future__ import annotations

import os
import struct
import sys
from pathlib import Path

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")

from PySide6.QtCore import QBuffer, QByteArray, QIODevice, Qt  # noqa: E402
from PySide6.QtGui import QGuiApplication, QImage, QPainter  # noqa: E402
from PySide6.QtSvg import QSvgRenderer  # noqa: E402

ICONS = Path(__file__).resolve().parents[1] / "resources" / "icons"


def render(renderer: QSvgRenderer, size: int) -> QImage:
    image = QImage(size, size, QImage.Format.Format_ARGB32)
    image.fill(Qt.GlobalColor.transparent)
    painter = QPainter(image)
    painter.setRenderHint(QPainter.RenderHint.Antialiasing)
    renderer.render(painter)
    painter.end()
    return image


def png_bytes(image: QImage) -> bytes:
    data = QByteArray()
    buf = QBuffer(data)
    buf.open(QIODevice.OpenModeFlag.WriteOnly)
    image.save(buf, "PNG")
    return bytes(data.data())


def write_ico(images: dict[int, QImage], path: Path) -> None:
    """ICO with PNG-compressed entries (valid since Windows Vista)."""
    entries = sorted(images)
    header = struct.pack("<HHH", 0, 1, len(entries))
    offset = 6 + 16 * len(entries)
    table, blobs = b"", b""
    for size in entries:
        blob = png_bytes(images[size])
        dim = 0 if size >= 256 else size
        table += struct.pack("<BBBBHHII", dim, dim, 0, 0, 1, 32, len(blob), offset)
        offset += len(blob)
        blobs += blob
    path.write_bytes(header + table + blobs)


def write_icns(images: dict[int, QImage], path: Path) -> None:
    """ICNS with PNG entries: ic07 128, ic08 256, ic09 512, ic10 1024 px."""
    types = {128: b"ic07", 256: b"ic08", 512: b"ic09", 1024: b"ic10"}
    body = b""
    for size, code in types.items():
        blob = png_bytes(images[size])
        body += code + struct.pack(">I", len(blob) + 8) + blob
    path.write_bytes(b"icns" + struct.pack(">I", len(body) + 8) + body)


def main() -> int:
    app = QGuiApplication(sys.argv)  # noqa: F841 (needed for QImage text/rendering)
    renderer = QSvgRenderer(str(ICONS / "tandem.svg"))
    if not renderer.isValid():
        print("invalid SVG", file=sys.stderr)
        return 1
    images = {s: render(renderer, s) for s in (16, 24, 32, 48, 64, 128, 256, 512, 1024)}
    (ICONS / "tandem-256.png").write_bytes(png_bytes(images[256]))
    (ICONS / "tandem-48.png").write_bytes(png_bytes(images[48]))
    write_ico({s: images[s] for s in (16, 24, 32, 48, 64, 128, 256)}, ICONS / "tandem.ico")
    write_icns(images, ICONS / "tandem.icns")
    print("wrote", ", ".join(sorted(p.name for p in ICONS.iterdir())))
    return 0


if __name__ == "__main__":
    sys.exit(main())
