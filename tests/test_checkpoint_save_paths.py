"""What `Table.save` may replace: a regular file or a new path, through symbolic links;
never a device node, a FIFO, a socket or a directory. Checkpoints get the umask's
permissions; path types and write errors are reported clearly; any legal file name
can be saved to; saves and loads of one path in several threads leave each other's
temporaries alone, and a dead writer's are removed through a link too."""

from __future__ import annotations

import errno
import os
import socket
import stat
import threading

import numpy as np
import pytest

import gearjax as gx
from gearjax import checkpoint


def small_table() -> gx.Table:
    table = gx.Table({"x": gx.Column((2,), "float32")}, capacity=4, max_length=3)
    table.insert({"x": np.arange(6, dtype=np.float32).reshape(3, 2)})
    return table


def round_trips(path) -> bool:
    loaded = gx.Table.load(path)
    try:
        return loaded.stats()["size"] == 1
    finally:
        loaded.close()


def temporaries(directory) -> list[str]:
    return [n for n in os.listdir(directory) if n.endswith(".tmp")]


def test_a_fifo_is_refused_and_left_a_fifo(tmp_path):
    fifo = tmp_path / "pipe.gx"
    os.mkfifo(fifo)
    with pytest.raises(FileExistsError, match=r"pipe\.gx.*it is a FIFO, not a regular file"):
        small_table().save(fifo)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert temporaries(tmp_path) == []


def test_a_character_device_is_refused_and_left_a_device(tmp_path):
    node = tmp_path / "null.gx"
    try:  # a copy of /dev/null's device numbers, in a private folder
        os.mknod(node, stat.S_IFCHR | 0o666, os.stat("/dev/null").st_rdev)
    except PermissionError:
        pytest.skip("mknod needs root (CAP_MKNOD) here: cannot make a device node to save onto")
    with pytest.raises(FileExistsError, match="it is a character device"):
        small_table().save(node)
    assert stat.S_ISCHR(os.lstat(node).st_mode)
    assert os.lstat(node).st_rdev == os.stat("/dev/null").st_rdev
    assert temporaries(tmp_path) == []


def test_a_socket_and_a_directory_are_refused(tmp_path):
    directory = tmp_path / "dir.gx"
    directory.mkdir()
    with pytest.raises(FileExistsError, match="it is a directory"):
        small_table().save(directory)
    assert directory.is_dir()
    sock_path = tmp_path / "s.gx"
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(str(sock_path))
        with pytest.raises(FileExistsError, match="it is a socket"):
            small_table().save(sock_path)
        assert stat.S_ISSOCK(os.lstat(sock_path).st_mode)
    finally:
        server.close()


def test_the_error_is_eexist_and_names_the_path_asked_for(tmp_path):
    fifo = tmp_path / "p.gx"
    os.mkfifo(fifo)
    with pytest.raises(FileExistsError) as info:
        small_table().save(fifo)
    assert info.value.errno == errno.EEXIST and info.value.filename == str(fifo)


def test_a_symlink_is_followed_and_stays_a_link(tmp_path):
    target = tmp_path / "real.gx"
    link = tmp_path / "link.gx"
    link.symlink_to(target)  # dangling: saving creates the target
    small_table().save(link)
    assert link.is_symlink() and os.readlink(link) == str(target)
    assert target.is_file() and not target.is_symlink()
    assert round_trips(link) and round_trips(target)
    small_table().save(link)  # the target exists now: replaced, the link kept
    assert link.is_symlink() and round_trips(target)
    assert temporaries(tmp_path) == []


def test_a_symlink_to_a_device_or_fifo_is_refused(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link.gx"
    link.symlink_to(fifo)
    with pytest.raises(FileExistsError, match=r"link\.gx \(a link to .*pipe\): it is a FIFO"):
        small_table().save(link)
    assert link.is_symlink() and stat.S_ISFIFO(os.lstat(fifo).st_mode)
    devnull = tmp_path / "devnull.gx"
    devnull.symlink_to("/dev/null")
    with pytest.raises(FileExistsError, match="it is a character device"):
        small_table().save(devnull)
    assert stat.S_ISCHR(os.lstat("/dev/null").st_mode)


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_a_checkpoint_gets_the_permissions_the_umask_gives(tmp_path, umask):
    old = os.umask(umask)
    try:
        path = tmp_path / "ck.gx"
        small_table().save(path)
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
        small_table().save(path)  # replacing a checkpoint: its own permissions, the same
        assert stat.S_IMODE(os.stat(path).st_mode) == 0o666 & ~umask
    finally:
        os.umask(old)


@pytest.mark.parametrize("mode", [0o600, 0o640, 0o444])
def test_a_replaced_checkpoint_keeps_its_permissions(tmp_path, mode):
    """Fails when the new file takes the umask's permissions: a checkpoint
    made private (0600) became world-readable (0644) at the next save."""
    path = tmp_path / "ck.gx"
    small_table().save(path)
    os.chmod(path, mode)
    small_table().save(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    link = tmp_path / "link.gx"
    link.symlink_to(path)
    small_table().save(link)  # through a link: the target's
    assert stat.S_IMODE(os.stat(path).st_mode) == mode and round_trips(path)


@pytest.mark.parametrize("kind", ["str", "bytes", "pathlib"])
def test_str_bytes_and_pathlike_paths(tmp_path, kind):
    path = tmp_path / "ck.gx"
    given = {"str": str(path), "bytes": os.fsencode(path), "pathlib": path}[kind]
    small_table().save(given)
    assert round_trips(given)


@pytest.mark.parametrize("bad, error, message", [
    (3, TypeError, "must be a str, bytes or os.PathLike, got int"),
    (None, TypeError, "got NoneType"),
    ("", ValueError, "non-empty"),
    ("a\0b.gx", ValueError, "NUL"),
])
def test_bad_paths_are_refused_for_save_and_load(bad, error, message):
    table = small_table()
    with pytest.raises(error, match=message):
        table.save(bad)
    with pytest.raises(error, match=message):
        gx.Table.load(bad)


def test_a_full_disk_names_the_path_and_leaves_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "ck.gx"
    small_table().save(path)
    before = path.read_bytes()
    real_fsync = os.fsync

    def full(fd):  # the write is flushed here: fail it as a full disk would
        if os.path.basename(os.readlink(f"/proc/self/fd/{fd}")).endswith(".tmp"):
            raise OSError(errno.ENOSPC, "No space left on device",
                          os.readlink(f"/proc/self/fd/{fd}"))
        return real_fsync(fd)

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError, match=r"cannot save to .*ck\.gx: No space left") as info:
        small_table().save(path)
    assert info.value.errno == errno.ENOSPC and info.value.filename == str(path)
    monkeypatch.undo()
    assert path.read_bytes() == before and temporaries(tmp_path) == []


@pytest.mark.parametrize("name", ["c" * 240 + ".gx", "c" * 255, "é" * 127])
def test_any_legal_file_name_can_be_saved_to(tmp_path, name):
    """Fails when a temporary is the name with about 27 characters added: a
    name of 240 (legal: at most 255 bytes) made a temporary's too long, and the
    save raised ENAMETOOLONG naming the temporary."""
    path = tmp_path / name
    small_table().save(path)
    small_table().save(path)  # replaced
    assert round_trips(path) and temporaries(tmp_path) == []


def test_a_too_long_name_names_the_path_asked_for(tmp_path):
    path = tmp_path / ("c" * 256)
    with pytest.raises(OSError) as info:
        small_table().save(path)
    assert info.value.errno == errno.ENAMETOOLONG and info.value.filename == str(path)
    assert temporaries(tmp_path) == []


def test_a_dead_writers_temporary_of_a_long_name_is_removed(tmp_path):
    path = tmp_path / ("c" * 240)
    orphan = tmp_path / f"{checkpoint._temporary_prefix(str(path))}999999999.abcdef.tmp"
    assert len(orphan.name.encode()) <= 255
    orphan.write_bytes(b"partial")  # no process 999999999: its writer died
    small_table().save(path)
    assert temporaries(tmp_path) == []


def test_a_load_through_a_link_removes_a_dead_writers_temporary(tmp_path):
    """Fails when a load looks for temporaries beside the link: a save through
    a link writes them beside its target."""
    target, link = tmp_path / "data" / "real.gx", tmp_path / "link.gx"
    target.parent.mkdir()
    link.symlink_to(target)
    small_table().save(link)
    orphan = target.parent / ".real.gx.999999999.abcdef.tmp"
    orphan.write_bytes(b"partial")
    assert round_trips(link)
    assert temporaries(target.parent) == []


def test_a_temporary_is_never_taken_for_an_orphan_while_it_is_made(tmp_path, monkeypatch):
    """Another thread's save or load of the path looks for orphans at the
    worst moment: just after this save's temporary was created. Fails when
    the temporary is marked as this process's own only after its creation
    (that thread removed it as a dead writer's, and this save failed with
    FileNotFoundError)."""
    path = tmp_path / "ck.gx"
    real_open = os.open

    def open_then_look(name, *args, **kwargs):
        fd = real_open(name, *args, **kwargs)
        if str(name).endswith(".tmp"):
            checkpoint._remove_orphans(str(path))  # another thread, just then
        return fd

    monkeypatch.setattr(os, "open", open_then_look)
    small_table().save(path)
    monkeypatch.undo()
    assert round_trips(path) and temporaries(tmp_path) == []


def test_threads_saving_and_loading_one_path_all_succeed(tmp_path):
    path = tmp_path / "ck.gx"
    small_table().save(path)
    errors = []

    def run(work):
        try:
            for _ in range(25):
                work()
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append(e)

    table = small_table()
    threads = [threading.Thread(target=run, args=(lambda: table.save(path),)) for _ in range(3)]
    threads.append(threading.Thread(target=run, args=(lambda: round_trips(path),)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors, errors
    assert round_trips(path) and temporaries(tmp_path) == []
