"""A private MariaDB server for the tests of studies on a real database (`search.storage` as an
RDB URL), started the way scripts/slurm/start.sh starts the SLURM cluster's: `mariadb-install-db`
into a fresh data directory, `mariadbd` on a unix socket only (no TCP port), root by socket
authentication. One server per test session, one database per test."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest
from helpers import unavailable

_counter = itertools.count()


class MariaDB:
    """A running mariadbd in its own directory; `url()` makes a new empty database."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="dots-mariadb-"))
        self.socket = self.root / "mysqld.sock"
        data = self.root / "data"
        shutil.chown(self.root, "mysql", "mysql")
        subprocess.run(
            ["mariadb-install-db", "--no-defaults", "--user=mysql", f"--datadir={data}", "--skip-test-db",
             "--auth-root-authentication-method=socket"],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        self.proc = subprocess.Popen(
            ["mariadbd", "--no-defaults", "--user=mysql", f"--datadir={data}", f"--socket={self.socket}",
             "--skip-networking", f"--pid-file={self.root / 'mariadbd.pid'}", f"--log-error={self.root / 'error.log'}"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        deadline = time.time() + 60
        while self.sql("SELECT 1").returncode != 0:
            if time.time() > deadline or self.proc.poll() is not None:
                self.stop()
                raise RuntimeError(f"mariadbd did not start: {(self.root / 'error.log').read_text()[-2000:]}")
            time.sleep(0.3)

    def sql(self, statement: str) -> subprocess.CompletedProcess:
        return subprocess.run(
            ["mariadb", "--no-defaults", f"--socket={self.socket}", "-u", "root", "-e", statement],
            capture_output=True,
            text=True,
        )

    def url(self) -> str:
        """An Optuna RDB URL of a new, empty database on this server."""
        name = f"dots_{os.getpid()}_{next(_counter)}"
        done = self.sql(f"CREATE DATABASE {name}")
        assert done.returncode == 0, done.stderr
        return f"mysql+pymysql://root@localhost/{name}?unix_socket={self.socket}"

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.root, ignore_errors=True)


@pytest.fixture(scope="session")
def mariadb():
    """The session's MariaDB server; skipped where none is installed, unless CI is set (CI installs
    it with the SLURM cluster: scripts/slurm/start.sh)."""
    missing = [b for b in ("mariadbd", "mariadb-install-db", "mariadb") if shutil.which(b) is None]
    try:
        import pymysql  # noqa: F401
    except ImportError:
        missing.append("PyMySQL")
    if missing:
        unavailable(f"no MariaDB here ({', '.join(missing)} missing)")
    server = MariaDB()
    yield server
    server.stop()
