"""The package as a user installs it: a wheel built from this checkout, installed into a clean
virtual environment outside it (as `pipx install` would), runs `agenvoy run` with its migrations,
templates and static files, and answers a message. Nothing of the checkout is on its path."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

import aiohttp
import pytest
from gateway_proc import Gateway, free_port

ROOT = Path(__file__).parents[1]
pytestmark = pytest.mark.slow


async def run(*argv: str | Path, cwd: Path, env: dict[str, str], within: float = 300) -> str:
    """Run a command to its end; its stdout, or a failure that shows its output."""
    proc = await asyncio.create_subprocess_exec(
        *map(str, argv),
        cwd=cwd,
        env=env,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), within)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, f"{argv} exited {proc.returncode}:\n{text[-4000:]}"
    return text


def outside_env(home: Path) -> dict[str, str]:
    """The environment of a user's shell: no path into the checkout or this test's venv."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = os.pathsep.join(
        p for p in env.get("PATH", "").split(os.pathsep) if not p.startswith(str(ROOT))
    )
    env["AGENVOY_HOME"] = str(home)
    return env


# Building the wheel and installing it with its dependencies into a new environment takes
# 30 to 60 s alone; beside the rest of the suite on two CPUs, longer than the usual limit.
@pytest.mark.timeout(360)
async def test_the_wheel_installs_outside_the_checkout_and_answers(tmp_path: Path) -> None:
    place = tmp_path / "elsewhere"
    place.mkdir()
    env = outside_env(tmp_path / "home")
    dist = tmp_path / "dist"
    await run(
        sys.executable,
        "-m",
        "pip",
        "wheel",
        "--no-deps",
        "-q",
        "-w",
        dist,
        ROOT,
        cwd=place,
        env=env,
    )
    [wheel] = dist.glob("agenvoy_gateway-*.whl")
    venv = tmp_path / "venv"
    await run(sys.executable, "-m", "venv", venv, cwd=place, env=env)
    # Not compiled ahead (`--no-compile`): a third of the install's time, and what runs here
    # compiles as it imports.
    await run(
        venv / "bin" / "pip",
        "install",
        "-q",
        "--no-compile",
        wheel,
        cwd=place,
        env=env,
        within=600,
    )

    where = await run(
        venv / "bin" / "python", "-c", "import gateway; print(gateway.__file__)", cwd=place, env=env
    )
    assert where.strip().startswith(str(venv)), where

    exe = str(venv / "bin" / "agenvoy")
    port = free_port()
    gateway = Gateway(tmp_path / "home", port, PATH=env["PATH"])
    gateway.exe, gateway.cwd = exe, place
    try:
        ready = await gateway.start()
        assert ready["event"] == "gateway ready"
        sent = await run(
            exe,
            "send",
            "hello from the wheel",
            cwd=place,
            env={**env, "AGENVOY_HTTP_PORT": str(port)},
        )
        # The notice of the temp- session it went to comes first.
        assert sent.strip().splitlines()[-1] == "echo: hello from the wheel"
        async with aiohttp.ClientSession() as http:
            # The console's templates and static files came with the wheel.
            async with http.get(f"{gateway.url}/ui/") as page:
                assert page.status == 200 and "<html" in (await page.text()).lower()
            async with http.get(f"{gateway.url}/ui/static/console.css") as css:
                assert css.status == 200 and len(await css.read()) > 100
    finally:
        await gateway.close()
