from __future__ import annotations

import compileall
import gc
import os
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from clock import FakeClock
from engine_rig import Engine, EngineRig, MigratedArchive
from fakes.openai import FakeOpenAI
from fakes.telegram import FakeTelegram
from small_disk import mounted_small_disk
from sqlalchemy.engine import make_url
from support import REDIS_URL, open_redis, skip_or_fail, wipe_redis
from tcp_relay import Relay

from gateway.logs import configure_logging
from gateway.runtime import Runtime
from gateway.settings import Settings
from gateway.store.kv import KVStore, SqliteKV
from gateway.store.kv.redis import RedisKV
from gateway.store.sessions import SessionStore


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode is kept (in the checkout's ignored __pycache__ folders) even where the
    environment says not to write it (PYTHONDONTWRITEBYTECODE):

    - the test modules, as pytest rewrites their asserts: each worker would otherwise rewrite
      and compile all of them again (collection: ~15 s of CPU per worker instead of ~5);
    - in the run's first process, before any worker: the gateway's modules. Some three
      hundred gateway and CLI processes start in a run, and each would compile its ~600
      modules from source again: about a third of a second of CPU per start."""
    sys.dont_write_bytecode = False
    if not hasattr(config, "workerinput"):
        root = Path(__file__).resolve().parent.parent
        for package in ("gateway", "adapters"):
            compileall.compile_dir(root / package, quiet=1)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """Workers for `-n auto`: most tests wait on a subprocess, a socket or a fake server
    rather than compute, so two per core keep the cores busy; AGENVOY_TEST_WORKERS overrides.
    The fast tier (`-m fast`) runs in this one process: every worker would first collect the
    whole suite, which takes longer than the tier's tests themselves."""
    chosen = os.environ.get("AGENVOY_TEST_WORKERS", "")
    if chosen:
        return int(chosen)
    if config.option.markexpr == "fast":
        return 0
    return 2 * len(os.sched_getaffinity(0))


# The test processes are not the gateway: their heaps (the collected suite, fixtures, fakes,
# gateways built and dropped test after test) are large and short-lived, and CPython's
# thresholds made them collect often enough to cost about a tenth of its time. The gateway's
# own settings (gateway/heap.py, applied by `heap.settle` when a test starts one in-process)
# are tested in test_heap.py; each test here begins with these again.
TEST_COLLECTOR = (20_000, 20, 20)


def pytest_collection_finish(session: pytest.Session) -> None:
    gc.collect()
    gc.freeze()  # the collected suite stays for the run: no collection need walk it again
    gc.set_threshold(*TEST_COLLECTOR)


@pytest.fixture(autouse=True)
def _test_collector() -> None:
    if gc.get_threshold() != TEST_COLLECTOR:
        gc.set_threshold(*TEST_COLLECTOR)


@pytest.fixture(autouse=True, scope="session")
def _quiet_logs() -> None:
    configure_logging("WARNING")


@pytest.fixture
async def telegram() -> AsyncIterator[FakeTelegram]:
    """A fake Telegram Bot API of the test's own."""
    async with FakeTelegram() as server:
        yield server


@pytest.fixture
async def model() -> AsyncIterator[FakeOpenAI]:
    """A fake OpenAI-compatible model server of the test's own."""
    async with FakeOpenAI() as server:
        yield server


@pytest.fixture
async def browser() -> AsyncIterator[Any]:
    """A headless Chromium (Debian's, or AGENVOY_CHROMIUM), driven by Playwright."""
    executable = os.environ.get("AGENVOY_CHROMIUM") or shutil.which("chromium")
    if not executable:
        skip_or_fail("no Chromium to drive (Debian: apt-get install chromium)")
    try:
        from playwright.async_api import async_playwright
    except ImportError:
        skip_or_fail("playwright is not installed")
    async with async_playwright() as driver:
        launched = await driver.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        try:
            yield launched
        finally:
            await launched.close()


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of a few MiB (tests/small_disk.py): a real filesystem that fills up."""
    with mounted_small_disk(tmp_path / "disk") as mounted:
        yield mounted


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    return Settings(home=tmp_path / "home", _env_file=None)


PG_ADMIN_DSN = os.environ.get("AGENVOY_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


async def _pg_database() -> tuple[str, str]:
    """Create an empty PostgreSQL database for one test; returns (async url, name)."""
    import secrets

    import asyncpg  # type: ignore[import-untyped]

    try:
        conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
    except (OSError, asyncpg.PostgresError) as exc:
        skip_or_fail(f"PostgreSQL not reachable at {PG_ADMIN_DSN}: {exc}")
        raise
    name = f"agenvoy_t_{secrets.token_hex(6)}"
    try:
        await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    base = PG_ADMIN_DSN.rsplit("/", 1)[0].replace("postgresql://", "postgresql+asyncpg://", 1)
    return f"{base}/{name}", name


async def _pg_drop(name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=3)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


@dataclass(frozen=True)
class RelayedDatabase:
    """A PostgreSQL database of one test's own behind a TCP relay the test can cut: `url`
    reaches the server directly, `relayed` through the relay."""

    url: str
    relay: Relay
    relayed: str


@pytest.fixture
async def relayed_database() -> AsyncIterator[RelayedDatabase]:
    url, name = await _pg_database()
    target = make_url(url)
    relay = await Relay(target.host or "127.0.0.1", target.port or 5432).start()
    relayed = target.set(host="127.0.0.1", port=relay.port).render_as_string(False)
    try:
        yield RelayedDatabase(url, relay, relayed)
    finally:
        await relay.close()
        await _pg_drop(name)


@pytest.fixture(params=["sqlite", "postgresql"])
async def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'store' / 'history.db'}"
        return
    url, name = await _pg_database()
    try:
        yield url
    finally:
        await _pg_drop(name)


@pytest.fixture
async def runtime(settings: Settings) -> AsyncIterator[Runtime]:
    """A gateway core with the default settings (offline agent, SQLite) in the test's home;
    modules that need other settings define their own."""
    started = await Runtime.start(settings)
    try:
        yield started
    finally:
        await started.close()


@pytest.fixture(scope="session")
def migrated_archive(tmp_path_factory: pytest.TempPathFactory) -> MigratedArchive:
    return MigratedArchive(tmp_path_factory.mktemp("migrated"))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def engines(tmp_path: Path, clock: FakeClock, migrated_archive: MigratedArchive) -> EngineRig:
    """Opens engines without a runtime (tests/engine_rig.py) in the test's home."""
    return EngineRig(tmp_path / "home", clock, migrated_archive)


@pytest.fixture
async def engine(engines: EngineRig) -> AsyncIterator[Engine]:
    """The engine on the default settings; modules that need other settings define their
    own from `engines`."""
    async with engines.open() as opened:
        yield opened


@pytest.fixture
async def store(settings: Settings, database_url: str) -> AsyncIterator[SessionStore]:
    opened = await SessionStore.open(settings.model_copy(update={"database_url": database_url}))
    try:
        yield opened
    finally:
        await opened.close()


@pytest.fixture(params=["sqlite", "redis"])
async def kv(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[KVStore]:
    store: KVStore
    if request.param == "sqlite":
        store = await SqliteKV.open(tmp_path / "kv.db")
    else:
        store = await open_redis()
    try:
        yield store
    finally:
        if isinstance(store, RedisKV):
            await wipe_redis(store)
        await store.close()


@pytest.fixture(params=["sqlite", "postgresql"])
async def backends(request: pytest.FixtureRequest) -> AsyncIterator[Backends]:
    """Makes the stores (as environment settings) for each gateway home of one test."""
    if request.param == "sqlite":
        yield Backends(postgres=False)
        return
    kv = await open_redis()  # skips (or fails in CI) when Redis is not there
    await kv.close()
    made = Backends(postgres=True)
    try:
        yield made
    finally:
        for name in made.databases:
            await _pg_drop(name)


class Backends:
    def __init__(self, *, postgres: bool) -> None:
        self.postgres = postgres
        self.databases: list[str] = []

    async def drop(self) -> None:
        for name in self.databases:
            await _pg_drop(name)
        self.databases.clear()

    async def new(self) -> dict[str, str]:
        """Stores of their own: one home's gateway shares them with nobody (several gateways
        on one database are the scale-out tests' business)."""
        if not self.postgres:
            return {}
        url, name = await _pg_database()
        self.databases.append(name)
        return {"AGENVOY_DATABASE_URL": url, "AGENVOY_KV_URL": REDIS_URL}
