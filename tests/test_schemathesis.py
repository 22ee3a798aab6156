"""Schemathesis against the served /openapi.json, with and without a token: no server error,
and nothing sent or answered that the document does not describe.

Run by `.ci/run` (`pytest -m schemathesis`); the default run leaves it out, being minutes long.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from gateway_proc import free_port

pytestmark = pytest.mark.schemathesis

SCHEMATHESIS = shutil.which("schemathesis") or str(Path(sys.executable).parent / "schemathesis")
EXAMPLES = 20
TOKEN = "schemathesis-token"
CONFIG = Path(__file__).with_name("schemathesis.toml")


@pytest.fixture(params=["anonymous", "token"])
def gateway(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[str, list[str]]]:
    if not Path(SCHEMATHESIS).exists():
        pytest.skip("schemathesis is not installed (pip install -e '.[dev]')")
    port = free_port()
    env = {
        **os.environ,
        "AGENVOY_HOME": str(tmp_path / "home"),
        "AGENVOY_HTTP_PORT": str(port),
        "AGENVOY_CONFIRM_TIMEOUT_SECONDS": "2",
    }
    headers: list[str] = []
    if request.param == "token":
        env["AGENVOY_API_TOKEN"] = TOKEN
        headers = ["-H", f"Authorization: Bearer {TOKEN}"]
    log = (tmp_path / "gateway.log").open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "gateway", "run"], env=env, stdout=log, stderr=log
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    pytest.fail((tmp_path / "gateway.log").read_text())
                time.sleep(0.1)
        yield url, headers
    finally:
        process.terminate()
        process.wait(30)
        log.close()


def test_the_api_matches_its_document(gateway: tuple[str, list[str]], tmp_path: Path) -> None:
    url, headers = gateway
    run = subprocess.run(
        [
            SCHEMATHESIS,
            "--config-file",
            str(CONFIG),
            "run",
            f"{url}/openapi.json",
            *headers,
            "--checks",
            "all",
            "--max-examples",
            str(EXAMPLES),
            "--seed",
            "1",
            # The session's log streams until the client leaves: there is no end to check.
            # Without a token, a token the fuzzer issues (POST /v1/tokens: on loopback with no
            # token everyone is the admin) turns token checks on at once, and every later call
            # rightly answers 401: the tokens routes are fuzzed in the run with a token.
            "--exclude-path-regex",
            "/log$" if headers else "(/log|/v1/tokens)$",
            "--request-timeout",
            "15",
            "--no-color",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=tmp_path,
    )
    assert run.returncode == 0, run.stdout[-20_000:] + run.stderr[-5_000:]
