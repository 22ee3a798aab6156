"""The console's profile pages in a real headless browser (Chromium, driven by Playwright), on
two gateway instances sharing one archive: a gateway admin makes a profile and binds it on
instance 1's console, and the next task instance 2 runs is answered by its model (the fake
OpenAI server says which), with no restart; a change and a rollback apply from the next task
as well. A refused change names its field, keeps what was entered (but never a key), and a
viewer who is not a gateway admin gets 403 and no link."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from fakes.openai import FakeOpenAI
from test_console import WAIT_MS, console, sign_in
from test_http import USERS, write_tokens
from test_profiles_instances import KEY_VARIABLE, ME, answered_by

from gateway.events import Inbound
from gateway.runtime import Runtime
from gateway.settings import Settings

pytestmark = pytest.mark.timeout(180)

KEY_LIKE = "sk-proj-abcdefghijklmnopqrstuvwxyz0123"


@pytest.fixture
async def pair(
    tmp_path: Path, database_url: str, model: FakeOpenAI, monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[tuple[Runtime, Runtime]]:
    """Two instances on one archive: the first serves the console (root is its admin), the
    second runs the tasks."""
    monkeypatch.setenv(KEY_VARIABLE, model.api_key)
    first = Settings(
        home=tmp_path / "a", database_url=database_url, admins="http:root", _env_file=None
    )
    write_tokens(first.store_dir, USERS)
    one = await Runtime.start(first)
    two = await Runtime.start(
        Settings(home=tmp_path / "b", database_url=database_url, _env_file=None)
    )
    try:
        yield one, two
    finally:
        await two.close()
        await one.close()


async def refused_with(page: Any, text: str) -> str:
    """The alert a refused form's page shows, once it says `text`."""
    alert = page.get_by_role("alert").filter(has_text=text)
    await alert.wait_for(timeout=WAIT_MS)
    return str(await alert.inner_text())


async def saved_as(page: Any, version: int) -> None:
    await (
        page.get_by_role("status").filter(has_text=f"version {version}.").wait_for(timeout=WAIT_MS)
    )


async def test_an_admin_makes_binds_changes_and_rolls_back_a_profile_for_another_instance(
    browser: Any, pair: tuple[Runtime, Runtime], model: FakeOpenAI
) -> None:
    one, two = pair
    async with console(one) as base:
        page = await sign_in(browser, base)
        await page.get_by_role("link", name="Profiles").click()
        await page.wait_for_url(f"{base}/ui/profiles")
        assert await page.locator('tr[data-profile="default"]').count() == 1

        # A new profile, from the list page.
        await page.get_by_label("Name").fill("alpha")
        await page.get_by_label("Agent").select_option("openai")
        await page.get_by_label("Model").fill("m-alpha")
        await page.get_by_label("Endpoint (base URL)").fill(model.url)
        await page.get_by_label("Key reference").fill(f"env:{KEY_VARIABLE}")
        await page.get_by_role("button", name="Create").click()
        await page.wait_for_url(f"{base}/ui/profiles/alpha?saved=1")
        assert await page.locator("#version").inner_text() == "1"

        # Bound to every cli- session, as the signed-in admin.
        await page.get_by_role("link", name="All profiles").click()
        row = page.locator('tr[data-profile="alpha"]')
        assert "m-alpha" in await row.inner_text()
        assert f"env:{KEY_VARIABLE}" in await row.inner_text()
        await page.get_by_label("Target").fill("prefix:cli")
        await page.get_by_label("Profile", exact=True).select_option("alpha")
        await page.get_by_role("button", name="Bind", exact=True).click()
        binding = page.locator('tr[data-binding="prefix:cli"]')
        await binding.wait_for(timeout=WAIT_MS)
        assert "alpha" in await binding.inner_text() and "http:root" in await binding.inner_text()

        # The other instance's next task is answered by the profile's model: no restart.
        assert await answered_by(two, model, "cli-one", "first") == "m-alpha"

        await page.locator('tr[data-profile="alpha"] a').click()
        await page.get_by_label("Model").fill("m-beta")
        await page.get_by_role("button", name="Save as a new version").click()
        await saved_as(page, 2)
        assert await answered_by(two, model, "cli-one", "second") == "m-beta"

        # A rollback is a new version with version 1's fields: m-alpha again, next task.
        await page.get_by_role("button", name="Roll back to version 1").click()
        await saved_as(page, 3)
        newest = page.locator('tr[data-version="3"]')
        assert "rollback to version 1" in await newest.inner_text()
        assert "http:root" in await newest.inner_text()
        assert await answered_by(two, model, "cli-one", "third") == "m-alpha"

        # A key pasted as the key is refused, named, and not shown again; the rest is kept.
        await page.get_by_label("Model").fill("m-gamma")
        await page.get_by_label("Key reference").fill(KEY_LIKE)
        await page.get_by_role("button", name="Save as a new version").click()
        said = await refused_with(page, "looks like a key")
        assert said.startswith("Not saved: key:"), said
        assert await page.get_by_label("Model").input_value() == "m-gamma"
        key_box = page.get_by_label("Key reference")
        assert await key_box.input_value() == ""
        assert await key_box.get_attribute("aria-invalid") == "true"
        assert "abcdefghijklmnop" not in await page.content()
        assert await page.locator("#version").inner_text() == "3"

        # A reference of a kind there is none of: refused, named, kept for correcting.
        await page.get_by_label("Key reference").fill("nope:X")
        await page.get_by_role("button", name="Save as a new version").click()
        said = await refused_with(page, "env:NAME")
        assert said.startswith("Not saved: key:"), said
        assert await page.get_by_label("Key reference").input_value() == "nope:X"
        assert await page.get_by_label("Model").input_value() == "m-gamma"
        assert await answered_by(two, model, "cli-one", "fourth") == "m-alpha"

        # Another admin changed it since this form was filled: refused, not overwritten.
        assert one.profiles is not None
        await one.profiles.set("alpha", {"persona": "Changed elsewhere"}, by="http:other")
        await page.get_by_label("Key reference").fill(f"env:{KEY_VARIABLE}")
        await page.get_by_role("button", name="Save as a new version").click()
        said = await refused_with(page, "changed meanwhile")
        assert said.startswith("Not saved: version:"), said
        assert await page.get_by_label("Model").input_value() == "m-gamma"
        assert await page.locator("#version").inner_text() == "4"
        await page.get_by_label("Persona").fill("Changed elsewhere")
        await page.get_by_role("button", name="Save as a new version").click()
        await saved_as(page, 5)
        assert await answered_by(two, model, "cli-one", "fifth") == "m-gamma"

        # A binding's errors, as BindingInvalid words them; then the binding removed.
        await page.get_by_role("link", name="All profiles").click()
        await page.get_by_label("Target").fill("nowhere:1")
        await page.get_by_role("button", name="Bind", exact=True).click()
        said = await refused_with(page, "KIND:KEY")
        assert said.startswith("target:"), said
        assert await page.get_by_label("Target").input_value() == "nowhere:1"
        await page.get_by_role("button", name="Remove the binding of prefix:cli").click()
        await page.get_by_text("Nothing is bound").wait_for(timeout=WAIT_MS)
        submission = await two.router.submit(Inbound(ME, "cli-one", "sixth"))
        assert (await two.router.wait(submission.task_hash, 10)).reply == "echo: sixth"


async def test_a_viewer_who_is_not_a_gateway_admin_gets_403(
    browser: Any, pair: tuple[Runtime, Runtime]
) -> None:
    one, _ = pair
    async with console(one) as base:
        page = await sign_in(browser, base, "ann")
        assert await page.get_by_role("link", name="Profiles").count() == 0
        for path in ("/ui/profiles", "/ui/profiles/default"):
            response = await page.goto(f"{base}{path}")
            assert response is not None and response.status == 403
            assert "only gateway admins" in await page.get_by_role("alert").inner_text()


async def test_a_form_without_the_pages_csrf_token_changes_nothing(
    browser: Any, pair: tuple[Runtime, Runtime]
) -> None:
    one, _ = pair
    async with console(one) as base:
        page = await sign_in(browser, base)
        (cookie,) = await page.context.cookies()
        jar = {cookie["name"]: cookie["value"]}
        async with aiohttp.ClientSession(cookies=jar) as client:
            forged = {"name": "forged", "model": "m-forged"}
            async with client.post(f"{base}/ui/profiles", data=forged) as resp:
                assert resp.status == 403 and "forged" in await resp.text()
            bound = {"target": "prefix:cli", "profile": "default"}
            async with client.post(f"{base}/ui/bindings", data=bound) as resp:
                assert resp.status == 403
        assert one.profiles is not None
        assert await one.profiles.names() == ["default"]
        assert await one.profiles.bindings() == []
