#!/bin/sh
# Makes double-clicking a placeholder (NAME.nimbus) in a file manager fetch the file and open it: installs the
# placeholder's MIME type and `nimbus open` as its handler, for this user (XDG_DATA_HOME, default ~/.local/share).
# `install.sh --remove` undoes it. Needs shared-mime-info (update-mime-database); xdg-utils sets the default.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
data=${XDG_DATA_HOME:-$HOME/.local/share}
if [ "${1:-}" = "--remove" ]; then
    rm -f "$data/mime/packages/nimbus-placeholder.xml" "$data/applications/nimbus-open.desktop"
    update-mime-database "$data/mime"
    command -v update-desktop-database >/dev/null && update-desktop-database "$data/applications" || true
    echo "Removed the placeholder handler."
    exit 0
fi
command -v nimbus >/dev/null || echo "warning: nimbus is not on PATH; the handler runs 'nimbus open'." >&2
mkdir -p "$data/mime/packages" "$data/applications"
cp "$here/nimbus-placeholder.xml" "$data/mime/packages/"
cp "$here/nimbus-open.desktop" "$data/applications/"
update-mime-database "$data/mime"
command -v update-desktop-database >/dev/null && update-desktop-database "$data/applications" || true
if command -v xdg-mime >/dev/null; then
    xdg-mime default nimbus-open.desktop application/x-nimbus-placeholder
fi
echo "Placeholders (NAME.nimbus) now open with 'nimbus open': the file is fetched, then opened by its own application."
