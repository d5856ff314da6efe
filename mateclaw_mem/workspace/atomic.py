"""The final step of every memory-file write: put new bytes in place without destroying a version
nobody read, and without ever following a symbolic link out of the workspace.

Why this is more than `os.replace`: a person never takes our lock. An editor's save (temp file, then
rename) or a plain `open('w')` can land between the moment a writer read the file and the moment it
replaces it. A plain rename would silently throw that save away. So the new file is swapped in with an
atomic *exchange* (Linux `renameat2(RENAME_EXCHANGE)`, macOS `renameatx_np(RENAME_SWAP)`): the
displaced file survives under the temp name, its bytes are compared with the hash the writer read,
and when they differ the exchange is undone and the caller re-plans on what the person wrote.

Every directory from the workspace root down is opened with `O_NOFOLLOW` and the temp file and the
rename go through that directory handle, so a folder swapped for a symlink mid-write can neither
receive the file nor collect temp files outside the workspace.

Where no exchange exists (other systems, filesystems that refuse it) the displaced file is held by a
hard link across the rename instead: it is re-checked immediately before and kept afterwards, so an
edit that slips in is handed back to the caller for history rather than lost.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import hashlib
import os
import sys
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from mateclaw_mem.errors import InvalidPathError

_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
_FILE_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
DIR_FD_SUPPORTED = os.open in os.supports_dir_fd and os.rename in os.supports_dir_fd and hasattr(os, "O_NOFOLLOW")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# -- the exchange primitive ------------------------------------------------------------------------

def _load_exchange():  # -> Callable[[int, str, int, str], None] | None
    """renameat2(RENAME_EXCHANGE) on Linux, renameatx_np(RENAME_SWAP) on macOS, else None."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    except OSError:
        return None
    if sys.platform.startswith("linux") and hasattr(libc, "renameat2"):
        fn, flag = libc.renameat2, 2  # RENAME_EXCHANGE
    elif sys.platform == "darwin" and hasattr(libc, "renameatx_np"):
        fn, flag = libc.renameatx_np, 2  # RENAME_SWAP
    else:
        return None
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    fn.restype = ctypes.c_int

    def exchange(dir_fd: int, a: str, b: str) -> None:
        if fn(dir_fd, os.fsencode(a), dir_fd, os.fsencode(b), flag) != 0:
            err = ctypes.get_errno()
            raise OSError(err, os.strerror(err), b)

    return exchange


_exchange = _load_exchange()
_exchange_refused: set[int] = set()  # st_dev of filesystems that answered EINVAL/ENOTSUP


# -- directory handles -------------------------------------------------------------------------------

@contextlib.contextmanager
def open_dir(root: Path, parts: Sequence[str], *, create: bool) -> Iterator[int]:
    """A handle on `root/parts...`, each component opened with O_NOFOLLOW relative to its parent.
    The root itself is the user's choice and may be a link; nothing below it may be."""
    fd = os.open(root, _DIR_FLAGS & ~getattr(os, "O_NOFOLLOW", 0))
    try:
        for part in parts:
            try:
                child = os.open(part, _DIR_FLAGS, dir_fd=fd)
            except FileNotFoundError:
                if not create:
                    raise
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                child = _open_child(fd, part)
            except OSError as exc:
                raise _link_error(exc, part) from None
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _open_child(fd: int, part: str) -> int:
    try:
        return os.open(part, _DIR_FLAGS, dir_fd=fd)
    except OSError as exc:
        raise _link_error(exc, part) from None


def _link_error(exc: OSError, part: str) -> OSError | InvalidPathError:
    if exc.errno in (errno.ELOOP, errno.ENOTDIR):
        return InvalidPathError(f"folder {part!r} is a symbolic link or not a folder; memory files are not "
                                "written through links")
    return exc


# -- the verified replace ----------------------------------------------------------------------------

@dataclass
class Replaced:
    """What the final step found. `ok`: the new bytes are in place and `displaced` is what they
    replaced (equal to what the writer read). Not ok: someone else's version is back in place and the
    caller must re-plan. `superseded` holds any further versions pushed aside on the way (a person who
    saved twice during the exchange); they belong in history."""

    ok: bool
    displaced: bytes | None = None
    superseded: list[bytes] = field(default_factory=list)


def replace_verified(root: Path, parts: Sequence[str], name: str, data: bytes, *, expected_sha: str,
                     mode: int | None = None) -> Replaced:
    """Write `data` to root/parts/name if the file still holds `expected_sha` ("" = must not exist).

    `parts` are the folders below `root` (created when missing, never followed through a link)."""
    if not DIR_FD_SUPPORTED:
        return _replace_plain(root.joinpath(*parts, name), data, expected_sha=expected_sha)
    with open_dir(root, parts, create=True) as dir_fd:
        _refuse_link(dir_fd, name)
        tmp = f".{name}.{uuid.uuid4().hex[:12]}.tmp"
        _write_temp(dir_fd, tmp, data, mode)
        try:
            if not expected_sha:
                return _create(dir_fd, tmp, name)
            st_dev = os.fstat(dir_fd).st_dev
            if _exchange is not None and st_dev not in _exchange_refused:
                try:
                    return _swap(dir_fd, tmp, name, data, expected_sha)
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.ENOSYS, getattr(errno, "EOPNOTSUPP", -1)):
                        raise
                    _exchange_refused.add(st_dev)
            return _linked_replace(dir_fd, tmp, name, expected_sha)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=dir_fd)
            with contextlib.suppress(OSError):
                os.fsync(dir_fd)


def _refuse_link(dir_fd: int, name: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
        if (st.st_mode & 0o170000) == 0o120000:
            raise InvalidPathError(f"{name} is a symbolic link; memory files are not written through links")


def _write_temp(dir_fd: int, tmp: str, data: bytes, mode: int | None) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FILE_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if mode is not None:
            with contextlib.suppress(OSError):
                os.fchmod(fd, mode)
        else:
            # Like a plain create: the process umask decides, not our 0600 temp mode.
            umask = os.umask(0)
            os.umask(umask)
            with contextlib.suppress(OSError):
                os.fchmod(fd, 0o666 & ~umask)
        os.fsync(fd)
    finally:
        os.close(fd)


def _read_at(dir_fd: int, name: str) -> bytes:
    fd = os.open(name, os.O_RDONLY | _FILE_NOFOLLOW, dir_fd=dir_fd)
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)


def _create(dir_fd: int, tmp: str, name: str) -> Replaced:
    # link() never replaces an existing name: the atomic "create only if absent".
    try:
        os.link(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileExistsError:
        return Replaced(False)
    return Replaced(True, b"")


def _swap(dir_fd: int, tmp: str, name: str, data: bytes, expected_sha: str) -> Replaced:
    try:
        _exchange(dir_fd, tmp, name)  # type: ignore[misc]
    except FileNotFoundError:
        return Replaced(False)  # deleted meanwhile: the caller re-reads and sees no file
    displaced = _read_at(dir_fd, tmp)
    if _sha(displaced) == expected_sha:
        return Replaced(True, displaced)
    # Someone saved between our read and our exchange: give their version its name back.
    _exchange(dir_fd, tmp, name)  # type: ignore[misc]
    back = _read_at(dir_fd, tmp)
    if _sha(back) == _sha(data):
        return Replaced(False, displaced)
    # A second save replaced our file in that instant: it is the newest, so it takes the name and
    # the first save, now superseded by the person themselves, is kept for history.
    _exchange(dir_fd, tmp, name)  # type: ignore[misc]
    return Replaced(False, back, [_read_at(dir_fd, tmp)])


def _linked_replace(dir_fd: int, tmp: str, name: str, expected_sha: str) -> Replaced:
    """No exchange here: hold the current file by a hard link across the rename and look at it after."""
    hold = f"{tmp}.hold"
    try:
        os.link(name, hold, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return Replaced(False)
    try:
        if _sha(_read_at(dir_fd, hold)) != expected_sha:
            return Replaced(False)
        os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        displaced = _read_at(dir_fd, hold)
        if _sha(displaced) != expected_sha:
            # Written in place after the check: we cannot give it back its name atomically, so it
            # is handed to the caller for history (and `status` shows the conflict).
            return Replaced(True, displaced, [displaced])
        return Replaced(True, displaced)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(hold, dir_fd=dir_fd)


def _replace_plain(path: Path, data: bytes, *, expected_sha: str) -> Replaced:
    """Systems without dir_fd support (Windows): re-check right before the rename."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        current = path.read_bytes()
    except FileNotFoundError:
        current = None
    if (current is None) != (not expected_sha) or (current is not None and _sha(current) != expected_sha):
        return Replaced(False)
    write_plain(path, data)
    return Replaced(True, current or b"")


def write_plain(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Temp file in the same folder, fsync, rename: for files that are ours alone (exports, state)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex[:12]}.tmp"
    try:
        with open(tmp, "wb") as fh:
            fh.write(data)
            if fsync:
                fh.flush()
                os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def delete_verified(root: Path, parts: Sequence[str], name: str, *, expected_sha: str) -> Replaced:
    """Remove root/parts/name if it still holds `expected_sha`: renamed aside first, checked, then
    unlinked; a file that changed meanwhile is put back."""
    if not DIR_FD_SUPPORTED:
        path = root.joinpath(*parts, name)
        if _sha(path.read_bytes()) != expected_sha:
            return Replaced(False)
        path.unlink()
        return Replaced(True)
    with open_dir(root, parts, create=False) as dir_fd:
        _refuse_link(dir_fd, name)
        aside = f".{name}.{uuid.uuid4().hex[:12]}.tmp"
        try:
            os.rename(name, aside, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except FileNotFoundError:
            return Replaced(False)
        displaced = _read_at(dir_fd, aside)
        if _sha(displaced) != expected_sha:
            try:
                os.link(aside, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd, follow_symlinks=False)
            except FileExistsError:
                return Replaced(False, displaced, [displaced])  # a newer file took the name: keep this one
            finally:
                os.unlink(aside, dir_fd=dir_fd)
            return Replaced(False, displaced)
        os.unlink(aside, dir_fd=dir_fd)
        with contextlib.suppress(OSError):
            os.fsync(dir_fd)
        return Replaced(True, displaced)


def clean_temp_files(root: Path) -> int:
    """Remove temp files a killed writer left behind (`.NAME.xxxx.tmp`). Returns how many."""
    count = 0
    if root.exists():
        for tmp in root.rglob(".*.tmp"):
            with contextlib.suppress(OSError):
                tmp.unlink()
                count += 1
    return count
