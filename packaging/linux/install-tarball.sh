#!/bin/sh
# Install Tandem from this unpacked tarball.
#
#   ./install.sh                     into ~/.local (no root needed)
#   ./install.sh --prefix DIR        into DIR (DIR/lib/tandem, DIR/bin, DIR/share)
#   ./install.sh --uninstall [--prefix DIR]
#
# Puts the app in PREFIX/lib/tandem, links PREFIX/bin/tandem and PREFIX/bin/tandem-cli,
# and installs the desktop entry, icons, AppStream metainfo and the GGUF MIME type under
# PREFIX/share. Then checks Qt's system libraries and prints the install line if some
# are missing.
set -eu
APP_ID=io.github.tandem_chat.tandem
prefix="${HOME}/.local"
uninstall=0
while [ $# -gt 0 ]; do
  case "$1" in
    --prefix) prefix="$2"; shift 2 ;;
    --prefix=*) prefix="${1#--prefix=}"; shift ;;
    --uninstall) uninstall=1; shift ;;
    -h|--help) sed -n '2,11p' "$0"; exit 0 ;;
    *) echo "usage: $0 [--prefix DIR] [--uninstall]" >&2; exit 2 ;;
  esac
done
here=$(cd "$(dirname "$0")" && pwd)
libdir="$prefix/lib/tandem"
share_files="applications/$APP_ID.desktop
icons/hicolor/48x48/apps/$APP_ID.png
icons/hicolor/256x256/apps/$APP_ID.png
icons/hicolor/scalable/apps/$APP_ID.svg
metainfo/$APP_ID.metainfo.xml
mime/packages/$APP_ID.xml"

refresh() {
  if command -v update-mime-database >/dev/null 2>&1; then update-mime-database "$prefix/share/mime" >/dev/null 2>&1 || true; fi
  if command -v update-desktop-database >/dev/null 2>&1; then update-desktop-database "$prefix/share/applications" >/dev/null 2>&1 || true; fi
  if command -v gtk-update-icon-cache >/dev/null 2>&1; then gtk-update-icon-cache -q -t -f "$prefix/share/icons/hicolor" >/dev/null 2>&1 || true; fi
}

if [ "$uninstall" = 1 ]; then
  rm -rf "$libdir"
  rm -f "$prefix/bin/tandem" "$prefix/bin/tandem-cli"
  echo "$share_files" | while read -r f; do rm -f "$prefix/share/$f"; done
  refresh
  echo "Tandem was removed from $prefix."
  exit 0
fi

mkdir -p "$prefix/lib" "$prefix/bin"
rm -rf "$libdir"
cp -a "$here/tandem" "$libdir"
ln -sf "$libdir/tandem" "$prefix/bin/tandem"
ln -sf "$libdir/tandem" "$prefix/bin/tandem-cli"
echo "$share_files" | while read -r f; do
  mkdir -p "$(dirname "$prefix/share/$f")"
  cp "$here/share/$f" "$prefix/share/$f"
done
# the menu entry runs the installed program by its full path (PREFIX/bin may not be on
# the desktop session's PATH); quoted as the Desktop Entry Specification asks
desktop="$prefix/share/applications/$APP_ID.desktop"
quoted=$(printf '%s' "$prefix/bin/tandem" | sed 's/[\\"`$]/\\\\&/g')
sed -i "s|^Exec=tandem %f\$|Exec=\"$quoted\" %f|; s|^TryExec=tandem\$|TryExec=$prefix/bin/tandem|" "$desktop"
refresh
echo "Tandem is installed: $prefix/bin/tandem (window), $prefix/bin/tandem-cli (command line)."
case ":${PATH}:" in
  *":$prefix/bin:"*) ;;
  *) echo "Note: $prefix/bin is not on your PATH; the applications menu entry works anyway." ;;
esac
"$libdir/tandem" --check-system-libs || true
