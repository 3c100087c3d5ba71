"""What a path given as a model really is, checked before anything opens it.

Every front end (window, CLI, library) turns a user's path into a model file through
:func:`check_model_file`: a folder, a named pipe (opening one for reading blocks until a
writer appears), a device or a dangling link is refused with a sentence that says what
the path is and what to do, instead of "not found" or a hang. :func:`model_entry_path`
maps any part of a split GGUF to part 1, the file llama.cpp must be given.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from app.catalog.gguf_meta import split_part_names, split_parts
from app.errors import ModelPathError


def check_model_file(path: str | os.PathLike[str]) -> Path:
    """``path`` as an absolute :class:`~pathlib.Path` when it is a readable regular file.

    Works on bytes-exact paths (a name that is not valid UTF-8 stays the same bytes).

    Raises:
        ModelPathError: the path does not exist, is a dangling symbolic link, a folder, a
            named pipe, a socket or a device, or cannot be read (the message names it).
    """
    p = Path(os.path.abspath(Path(path).expanduser()))
    try:
        st = p.stat()  # follows links
    except FileNotFoundError:
        if p.is_symlink():
            try:
                target = os.readlink(p)
            except OSError:
                target = "?"
            raise ModelPathError(
                f"{p} is a link to {target}, which does not exist. Point it at a GGUF file or "
                "choose the file itself."
            ) from None
        raise ModelPathError(f"Model file not found: {p}. Check the path.") from None
    except OSError as exc:
        raise ModelPathError(f"{p} cannot be read: {exc.strerror or exc}.") from exc
    mode = st.st_mode
    if stat.S_ISDIR(mode):
        inside = sorted(n for n in os.listdir(p) if n.lower().endswith(".gguf"))[:3] if os.access(p, os.R_OK) else []
        hint = f" It holds {', '.join(inside)}." if inside else ""
        raise ModelPathError(f"{p} is a folder, not a GGUF file: choose a .gguf file inside it.{hint}")
    if not stat.S_ISREG(mode):
        kind = (
            "a named pipe" if stat.S_ISFIFO(mode)
            else "a socket" if stat.S_ISSOCK(mode)
            else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode)
            else "not a regular file"
        )
        raise ModelPathError(f"{p} is {kind}, not a GGUF file. Choose a .gguf model file.")
    if not os.access(p, os.R_OK):
        raise ModelPathError(f"{p} cannot be read: permission denied.")
    return p


def model_entry_path(path: str | os.PathLike[str]) -> tuple[Path, str | None]:
    """The file to give llama.cpp for ``path``, and a note when it is not ``path`` itself.

    Any part of a split GGUF (``…-00002-of-00003.gguf``) maps to part 1, which is where
    llama.cpp starts reading the parts.

    Raises:
        ModelPathError: from :func:`check_model_file`, for ``path`` or for part 1 when
            ``path`` is a later part and part 1 is missing.
    """
    p = check_model_file(path)
    sp = split_parts(p)
    if sp is None or sp[1] == 1:
        return p, None
    first, no, count = sp
    if not first.exists() and not first.is_symlink():
        names = split_part_names(first.name, count)
        raise ModelPathError(
            f"{p.name} is part {no} of {count} of a split model; open part 1 ({names[0]}), which"
            " is not in the same folder."
        )
    check_model_file(first)
    return first, f"{p.name} is part {no} of {count} of a split model; part 1 ({first.name}) was opened."
