"""Atomic writes: an output file or folder appears whole, or not at all.

Every command writes through these helpers, so a full disk, a killed process or an error half-way
leaves the previous file (or nothing) in place, never a truncated CSV or a partial bundle:

    with atomic_path(out) as tmp:        # a file: write tmp, then os.replace(tmp, out)
        df.to_csv(tmp, index=False)
    with atomic_dir(bundle_dir) as tmp:  # a folder: build tmp, then rename it to bundle_dir
        write_files(tmp)

A target that exists and is not a regular file or folder (`/dev/stdout`, `/dev/full`, a FIFO) is
written in place: it cannot be replaced, and there is nothing to leave half-written. OS errors
(ENOSPC, EACCES, ENOTDIR...) propagate as OSError; the CLI turns them into one `error:` line.
"""
from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterator


#: errors of a write that name no file (a full disk, a quota, a file too large, an I/O error): the output's, then
_WRITE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO)


def _is_special(path: Path) -> bool:
    """Whether `path` exists and is a device, FIFO or socket (written in place, never replaced)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def _mode(target: Path, default: int) -> int:
    """The permissions `target` has, else `default` less the process's umask (what open() would give)."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return default & ~umask


def _existing_folder(target: Path) -> Path:
    """The nearest folder above `target` that exists; a file where a folder should be is ENOTDIR naming it."""
    for folder in target.parents:
        if folder.exists():
            if not folder.is_dir():
                raise NotADirectoryError(20, "Not a directory", str(folder))
            return folder
    return Path(".")


def _make_parent(target: Path) -> None:
    """Create `target`'s folder; a file where a folder should be is ENOTDIR naming that file."""
    _existing_folder(target)
    target.parent.mkdir(parents=True, exist_ok=True)


def check_writable(path: str | Path) -> None:
    """Raise the OSError `atomic_path(path)` would meet, without writing anything: a folder at `path`, a file
    where one of its folders should be, a folder that cannot be written. A command calls it on its output
    paths before its work, so that a bad one fails first, not after a first output was written."""
    target = Path(path)
    if _is_special(target):
        return
    if target.is_dir():
        raise IsADirectoryError(21, "Is a directory", str(target))
    folder = _existing_folder(target)
    if not os.access(folder, os.W_OK | os.X_OK):
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS), str(target))
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(target))


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to `path` (same folder, same suffix, so writers that infer a format
    from it still do); on success it replaces `path`, on any exception it is removed. The parent
    folder is created when missing."""
    target = Path(path)
    if _is_special(target):
        try:
            yield target
        except OSError as e:  # name the file: a device's ENOSPC comes without one
            e.filename = e.filename or str(target)
            raise
        return
    check_writable(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        # ".NAME~random.SUFFIX": the same extension as the target, for writers that infer a format from it
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}~", suffix=target.suffix)
    except OSError as e:  # e.g. a read-only folder: name the output, not the temporary file
        e.filename = str(target)
        raise
    os.close(fd)
    try:
        yield Path(tmp)
        os.chmod(tmp, _mode(target, 0o666))  # mkstemp's 0600 would hide the output from other users
        os.replace(tmp, target)
    except BaseException as e:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        if isinstance(e, OSError) and (e.filename == tmp or (e.filename is None and e.errno in _WRITE_ERRNOS)):
            e.filename, e.filename2 = str(target), None
        raise


@contextlib.contextmanager
def atomic_dir(path: str | Path, marker: str = "manifest.json") -> Iterator[Path]:
    """Yield a new empty temporary folder next to `path`; on success it takes `path`'s place, on any
    exception it is removed with everything written into it. An existing folder at `path` is replaced
    (once the new one is complete) only when it is empty or holds `marker` (an earlier output of the
    same kind): a folder of the user's other files is never deleted."""
    target = Path(path)
    if target.exists() and not target.is_dir():
        raise NotADirectoryError(20, "Not a directory", str(target))
    if target.is_dir() and any(target.iterdir()) and not (target / marker).is_file():
        raise FileExistsError(17, f"folder exists, is not empty and holds no {marker} to replace", str(target))
    _make_parent(target)
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp"))
    try:
        yield tmp
        os.chmod(tmp, _mode(target, 0o777))
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old"))
            os.replace(target, old / "d")
            os.replace(tmp, target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


#: tables at least this long are written with pyarrow's CSV writer
FAST_CSV_ROWS = 20_000


def write_csv(df, path: str | Path, **kwargs) -> None:
    """`df.to_csv(path, index=False, **kwargs)`, atomically; tables of FAST_CSV_ROWS rows or more through
    pyarrow's writer (10x faster; it reads back identical but quotes its header)."""
    from hybridperf.csvio import fast_to_csv

    kwargs.setdefault("index", False)
    with atomic_path(path) as tmp:
        if kwargs == {"index": False} and len(df) >= FAST_CSV_ROWS:
            fast_to_csv(df, tmp)
        else:
            df.to_csv(tmp, **kwargs)


def write_table(df, path: str | Path) -> None:
    """`df` as parquet where `path` ends in .parquet or .pq, else as CSV (`write_csv`), atomically."""
    if Path(path).suffix.lower() in (".parquet", ".pq"):
        with atomic_path(path) as tmp:
            df.to_parquet(tmp, index=False)
    else:
        write_csv(df, path)


def write_text(path: str | Path, text: str) -> None:
    """`Path(path).write_text(text)`, atomically."""
    with atomic_path(path) as tmp:
        with open(tmp, "w", encoding="utf-8") as fh:
            fh.write(text)
