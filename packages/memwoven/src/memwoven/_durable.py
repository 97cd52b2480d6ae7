"""Making a directory's entries durable, for every module that writes files (the file backends, the vector cache)."""

from __future__ import annotations

import errno
import os
from pathlib import Path

__all__ = ["fsync_directory"]


def fsync_directory(directory: str | Path) -> None:
    """Make a rename, unlink or new entry in `directory` durable (a no-op where directories cannot be opened)."""
    if os.name == "nt":  # Windows cannot open a directory; NTFS journals the rename itself
        return
    fd = os.open(directory, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        os.fsync(fd)
    except OSError as error:  # some file systems refuse to fsync a directory
        if error.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)
