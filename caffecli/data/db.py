"""Key-value databases of serialized Datum records (Caffe's util/db_lmdb and db_leveldb).

``open_reader(path, backend)`` gives a cursor that walks the keys in order and wraps to the
first record at the end, as Caffe's DataLayer does; ``open_writer`` buffers puts and commits in
transactions (LMDB doubles its map when full, as Caffe's LMDBTransaction does).
"""
import os
import shutil
import threading

import lmdb

from .. import glog
from ..errors import CaffeError

LMDB, LEVELDB = "lmdb", "leveldb"


def backend_name(backend):
    """A backend given as DataParameter enum (0/1) or as the tools' string, which Caffe's
    GetDB takes only as 'lmdb' or 'leveldb'."""
    if isinstance(backend, int):
        return LMDB if backend == 1 else LEVELDB
    name = str(backend)
    if name not in (LMDB, LEVELDB):
        raise CaffeError("Unknown database backend %r (use lmdb or leveldb)" % backend)
    return name


def say_opened(backend, path):
    """The line Caffe's LMDB::Open / LevelDB::Open logs."""
    glog.info("db_%s.opened" % backend, "Opened %s %s" % (backend, path))


def _import_plyvel(path):
    try:
        import plyvel
    except ImportError:
        raise CaffeError("%s: reading LevelDB needs the plyvel package (pip install plyvel)"
                         % path) from None
    return plyvel


class Cursor:
    """An ordered, wrap-around cursor over (key, value) bytes pairs."""

    def __init__(self, path):
        self.path = path

    # subclasses provide: seek_to_first(), _advance(), valid(), key(), value(), seek(key), close()
    def next(self):
        """Advance one record; past the last one, restart at the first. Returns True on wrap."""
        self._advance()
        if not self.valid():
            self.seek_to_first()
            return True
        return False

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


_OPEN = {}   # (kind, realpath) -> [handle, users]: py-lmdb and LevelDB open a path once
# re-entrant: opening a database can collect a dead Data layer whose finalizer releases its own
# handle from inside _acquire (a plain Lock deadlocked the thread on itself)
_OPEN_LOCK = threading.RLock()


def _acquire(kind, path, opener):
    key = (kind, os.path.realpath(path))
    with _OPEN_LOCK:
        entry = _OPEN.get(key)
        if entry is None:
            entry = _OPEN[key] = [opener(), 0]
        entry[1] += 1
        return key, entry[0]


def _release(key):
    with _OPEN_LOCK:
        entry = _OPEN.get(key)
        if entry is not None:
            entry[1] -= 1
            if entry[1] <= 0:
                del _OPEN[key]
                entry[0].close()


def _open_lmdb(path):
    try:
        # read-only and lock-free: Caffe opens with MDB_RDONLY, and databases copied
        # without their lock.mdb (or on read-only media) must still open
        env = lmdb.open(path, readonly=True, lock=False, readahead=False, subdir=True)
    except lmdb.Error as e:
        raise CaffeError("%s: cannot open LMDB database (%s)" % (path, e)) from None
    _check_lmdb_size(env, os.path.join(path, "data.mdb"))
    return env


def _check_lmdb_size(env, data_file):
    """LMDB maps its file into memory: reading a page past the end of a truncated file kills
    the process (SIGBUS), so the file must hold every page the database says it uses."""
    pages, page_size = env.info()["last_pgno"] + 1, env.stat()["psize"]
    have = os.path.getsize(data_file)
    if have < pages * page_size:
        env.close()
        raise CaffeError("%s: LMDB file is truncated (%d bytes; its %d pages of %d bytes need "
                         "%d)" % (data_file, have, pages, page_size, pages * page_size))


def _open_leveldb(path):
    plyvel = _import_plyvel(path)
    try:
        return plyvel.DB(path, create_if_missing=False)
    except plyvel.Error as e:
        raise CaffeError("%s: cannot open LevelDB database (%s)"
                         % (path, str(e).splitlines()[0])) from None


class LMDBCursor(Cursor):
    def __init__(self, path):
        super().__init__(path)
        if not os.path.isdir(path):
            raise CaffeError("%s: LMDB database not found (no such folder)" % path)
        self._key, self._env = _acquire("lmdb", path, lambda: _open_lmdb(path))
        self._txn = self._env.begin(buffers=False)
        self._cur = self._txn.cursor()
        self._valid = self._cur.first()
        if not self._valid:
            self.close()
            raise CaffeError("%s: LMDB database is empty" % path)

    def seek_to_first(self):
        self._valid = self._cur.first()

    def _advance(self):
        self._valid = self._cur.next()

    def valid(self):
        return self._valid

    def key(self):
        return self._cur.key()

    def value(self):
        return self._cur.value()

    def seek(self, key):
        if not self._cur.set_key(key):
            raise CaffeError("%s: record %r not found" % (self.path, key))
        self._valid = True

    def close(self):
        env, self._env = getattr(self, "_env", None), None
        if env is not None:
            self._txn.abort()
            _release(self._key)


class LevelDBCursor(Cursor):
    def __init__(self, path):
        super().__init__(path)
        if not os.path.isdir(path):
            raise CaffeError("%s: LevelDB database not found (no such folder)" % path)
        self._key, self._db = _acquire("leveldb", path, lambda: _open_leveldb(path))
        self._it = self._db.raw_iterator()
        self._it.seek_to_first()
        if not self._it.valid():
            self.close()
            raise CaffeError("%s: LevelDB database is empty" % path)

    def seek_to_first(self):
        self._it.seek_to_first()

    def _advance(self):
        self._it.next()

    def valid(self):
        return self._it.valid()

    def key(self):
        return self._it.key()

    def value(self):
        return self._it.value()

    def seek(self, key):
        self._it.seek(key)
        if not self._it.valid() or self._it.key() != key:
            raise CaffeError("%s: record %r not found" % (self.path, key))

    def close(self):
        db, self._db = getattr(self, "_db", None), None
        if db is not None:
            self._it.close()
            _release(self._key)


def open_reader(path, backend):
    """A wrap-around cursor on the first record of the database at ``path``."""
    name = backend_name(backend)
    return LMDBCursor(path) if name == LMDB else LevelDBCursor(path)


class Writer:
    """Buffered puts committed in transactions; ``close()`` commits what is left."""

    def __init__(self, path):
        self.path = path
        self._pending = []

    def put(self, key, value):
        if isinstance(key, str):
            key = key.encode("utf-8")
        self._pending.append((key, value))

    def commit(self):
        if self._pending:
            self._write(self._pending)
        self._pending = []

    def close(self):
        self.commit()
        self._close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, *exc):
        if exc_type is None:
            self.close()
        else:
            self._pending = []
            self._close()


class LMDBWriter(Writer):
    def __init__(self, path, map_size=1 << 26):
        super().__init__(path)
        self._lmdb = lmdb
        if not os.path.isdir(path):
            os.mkdir(path, 0o744)   # Caffe's LMDB::Open: mkdir(source, 0744)
        # Caffe's mode: 0664 under the umask (py-lmdb's default, 0755, marks data executable)
        self._env = lmdb.open(path, map_size=map_size, subdir=True, mode=0o664)

    def _write(self, items):
        while True:
            try:
                with self._env.begin(write=True) as txn:
                    for k, v in items:
                        txn.put(k, v)
                return
            except self._lmdb.MapFullError:
                self._env.set_mapsize(self._env.info()["map_size"] * 2)

    def _close(self):
        if self._env is not None:
            self._env.close()
            self._env = None


class LevelDBWriter(Writer):
    def __init__(self, path):
        super().__init__(path)
        plyvel = _import_plyvel(path)
        # Caffe's options: 64 KiB blocks, 256 MiB write buffer, fail when it already exists
        self._db = plyvel.DB(path, create_if_missing=True, error_if_exists=True,
                             block_size=65536, write_buffer_size=268435456,
                             max_open_files=100)

    def _write(self, items):
        with self._db.write_batch() as wb:
            for k, v in items:
                wb.put(k, v)

    def _close(self):
        if self._db is not None:
            self._db.close()
            self._db = None


def open_writer(path, backend):
    """A writer for a new database at ``path`` (the folder is created)."""
    name = backend_name(backend)
    return LMDBWriter(path) if name == LMDB else LevelDBWriter(path)


def iterate(path, backend):
    """Yield every (key, value) once, in key order (no wrap-around)."""
    cur = open_reader(path, backend)
    try:
        while cur.valid():
            yield cur.key(), cur.value()
            cur._advance()
    finally:
        cur.close()


class new_database:
    """Context manager for converters: write into a temporary folder beside ``path`` and rename
    it to ``path`` only when the block succeeds, so a failed run leaves no half-written db;
    ``log_opened`` False leaves out Caffe's "Opened" line (a tool that opens its db directly)."""

    def __init__(self, path, backend, log_opened=True):
        self.log_opened = log_opened
        self.given = path
        self.path = os.path.normpath(path)
        self.backend = backend_name(backend)
        if os.path.exists(self.path):
            raise CaffeError("%s: database already exists (remove it or choose another name)"
                             % path)
        parent = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(parent):
            raise CaffeError("%s: parent folder %s does not exist" % (path, parent))
        self.tmp = "%s.tmp-%d" % (self.path, os.getpid())
        self.writer = None

    def __enter__(self):
        if os.path.exists(self.tmp):
            shutil.rmtree(self.tmp)
        self.writer = open_writer(self.tmp, self.backend)
        if self.log_opened:
            say_opened(self.backend, self.given)
        return self.writer

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.writer.close()
            os.rename(self.tmp, self.path)
        else:
            self.writer.__exit__(exc_type, exc, tb)
            shutil.rmtree(self.tmp, ignore_errors=True)
        return False
