"""The console's pages for agent profiles, for gateway admins only (others get 403, as over the
API): every profile with its current version and fields, every binding, and the deleted profiles;
one profile's fields as a form, whose submission makes a new version, and its history with a
rollback per older version; a deleted profile's history, whose rollback brings it back; bindings
made and removed. Each change goes through gateway/profiles/service.py, whose
change counter the next task of every instance reads: nothing here restarts anything.

Every form answers with a redirect (post/redirect/get); a refused one is shown again with its
error and what was entered (adapters/web/refusals.py), but a value that looks like a key, which
gateway/profiles/spec.py refuses and no page shows."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Final, NoReturn

from aiohttp import web

from adapters.http.context import Context
from adapters.web.auth import Form, Viewer
from adapters.web.pages import Pages
from adapters.web.refusals import Refusal, RefusedForms
from gateway.profiles.bindings import KINDS, BindingInvalid
from gateway.profiles.service import Profiles, UnknownProfile
from gateway.profiles.spec import (
    AGENT_KINDS,
    DEFAULT,
    FIELD_NAMES,
    NAME,
    REASONING_LEVELS,
    ProfileInvalid,
    ProfileSpec,
    check_name,
    looks_like_key,
)
from gateway.store.profiles import DELETED, ProfileConflict, ProfileVersion

FORBIDDEN: Final = "only gateway admins manage agent profiles"
# The fields the list page's form makes a profile with; the rest are on the profile's page.
CREATE_FIELDS: Final = ("agent", "model", "base_url", "key")
# The list shows these as columns; the others as one line of what is set.
COLUMNS: Final = ("agent", "model", "base_url", "key")
_MAX_VALUE_CHARS: Final = 20_000  # a persona's limit and some: nothing larger is kept


def as_text(name: str, value: Any) -> str:
    """A field's value as the form shows it; a submitted value is compared with this."""
    if isinstance(value, list | tuple):
        return ", ".join(value)
    if name == "budgets":
        return json.dumps(value, sort_keys=True) if value else ""
    return "" if value is None else str(value)


def texts(spec: ProfileSpec) -> dict[str, str]:
    return {name: as_text(name, value) for name, value in spec.shown().items()}


def others(fields: dict[str, str], skip: Iterable[str] = COLUMNS) -> str:
    """The fields set, one phrase each (a persona shortened), but those of `skip` (the list's
    columns)."""
    said = []
    for name in FIELD_NAMES:
        value = fields[name]
        if name in skip or not value:
            continue
        short = value if len(value) <= 60 else value[:57] + "…"
        said.append(f"{name}: {short}")
    return "; ".join(said)


def _said(exc: Exception) -> tuple[str, str]:
    """The field an error names, and the error as a page may show it: never a key that a
    message quoted back from what was entered."""
    text = str(exc)
    field = exc.field if isinstance(exc, ProfileInvalid) else text.partition(":")[0]
    if isinstance(exc, ProfileConflict):
        field = "version"
    if looks_like_key(text):
        text = f"{field}: refused; what was entered looks like a key and is not shown"
    return field, text


def _entered(form: Form, names: Iterable[str]) -> dict[str, str]:
    """The fields `form` carries among `names`, newlines as typed (a browser sends CRLF)."""
    return {
        name: str(form[name]).replace("\r\n", "\n")[:_MAX_VALUE_CHARS]
        for name in names
        if name in form
    }


def _name(request: web.Request) -> str:
    # Checked before anything else: it goes into addresses the page and redirects write.
    name = request.match_info["name"]
    if not NAME.fullmatch(name):
        raise web.HTTPNotFound(text=f"no profile {name[:40]!r}")
    return name


class ProfilePages:
    def __init__(self, ctx: Context, pages: Pages) -> None:
        self.ctx = ctx
        self.pages = pages
        self.refusals = RefusedForms(ctx.runtime.kv)

    # -- who may ---------------------------------------------------------------------------

    async def _profiles(self, viewer: Viewer) -> Profiles:
        # Asked again here rather than trusting the page's link: that one gives way to an
        # archive that cannot be reached, this one answers 503 then.
        if not (await self.ctx.access.caller(viewer.origin())).gateway_admin:
            raise web.HTTPForbidden(text=FORBIDDEN)
        profiles = self.ctx.runtime.profiles
        if profiles is None:
            raise web.HTTPNotFound(text="agent profiles are not served here")
        return profiles

    async def _viewing(self, request: web.Request) -> tuple[Viewer, Profiles]:
        viewer = await self.pages.viewer(request)
        return viewer, await self._profiles(viewer)

    async def _posted(self, request: web.Request) -> tuple[Viewer, Profiles, Form]:
        viewer = await self.pages.viewer(request)
        form = await request.post()
        self.pages.auth.check_form(request, viewer, form)
        return viewer, await self._profiles(viewer), form

    # -- refused forms ---------------------------------------------------------------------

    async def _refuse(
        self, viewer: Viewer, page: str, form: str, exc: Exception, entered: dict[str, str]
    ) -> NoReturn:
        field, error = _said(exc)
        kept = {name: "" if looks_like_key(value) else value for name, value in entered.items()}
        await self.refusals.refuse(viewer, page, form, error, field, kept)

    async def _refusal(self, viewer: Viewer, request: web.Request) -> Refusal | None:
        return await self.refusals.shown(viewer, request)

    # -- the list --------------------------------------------------------------------------

    async def index(self, request: web.Request) -> web.Response:
        viewer, profiles = await self._viewing(request)
        rows = []
        for name in await profiles.names():
            version, spec = await profiles.get(name)
            fields = texts(spec)
            rows.append(
                {"name": name, "version": version, "fields": fields, "others": others(fields)}
            )
        refusal = await self._refusal(viewer, request)
        return self.pages.render(
            "profiles.html",
            viewer,
            rows=rows,
            bindings=await profiles.bindings(),
            deleted=await profiles.deleted(),
            refusal=refusal,
            values=refusal.values if refusal else {},
            agents=AGENT_KINDS,
            kinds=KINDS,
        )

    async def create(self, request: web.Request) -> web.Response:
        viewer, profiles, form = await self._posted(request)
        entered = _entered(form, ("name", *CREATE_FIELDS))
        name = entered.get("name", "").strip()
        changes = {f: entered[f] for f in CREATE_FIELDS if entered.get(f, "").strip()}
        try:
            check_name(name)
            if name in await profiles.names():
                raise ProfileInvalid("name", f"{name!r} exists: change it on its own page")
            made = await profiles.set(name, changes, by=_by(viewer))
        except (ProfileInvalid, ProfileConflict) as exc:
            await self._refuse(viewer, "/ui/profiles", "create", exc, entered)
        raise web.HTTPSeeOther(f"/ui/profiles/{name}?saved={made.version}")

    # -- one profile -----------------------------------------------------------------------

    async def profile(self, request: web.Request) -> web.Response:
        viewer, profiles = await self._viewing(request)
        name = _name(request)
        try:
            history = [] if name == DEFAULT else await profiles.history(name)
            # A deleted profile has no current version, only its history to roll back from.
            gone = history[-1] if history and history[-1].change == DELETED else None
            version, spec = (
                (gone.version, ProfileSpec.from_json(gone.spec))
                if gone is not None
                else await profiles.get(name)
            )
        except (UnknownProfile, ProfileInvalid):
            raise web.HTTPNotFound(text=f"no profile {name!r}") from None
        refusal = await self._refusal(viewer, request)
        saved = request.query.get("saved", "")
        return self.pages.render(
            "profile.html",
            viewer,
            profile=name,
            version=version,
            builtin=name == DEFAULT,
            deleted=gone,
            values={**texts(spec), **(refusal.values if refusal else {})},
            refusal=refusal,
            saved=int(saved) if saved.isdigit() and len(saved) < 10 else None,
            history=[_entry(v, version, gone is not None) for v in reversed(history)],
            agents=AGENT_KINDS,
            reasoning_levels=REASONING_LEVELS,
        )

    async def change(self, request: web.Request) -> web.Response:
        """A new version with the fields the form changed. The form names the version it was
        filled from: one another admin changed meanwhile is refused, not overwritten with
        this form's older values."""
        viewer, profiles, form = await self._posted(request)
        name = _name(request)
        page = f"/ui/profiles/{name}"
        entered = _entered(form, FIELD_NAMES)
        try:
            version, spec = await profiles.get(name)
            based_on = str(form.get("version", str(version)))
            if based_on != str(version):
                raise ProfileInvalid(
                    "version",
                    f"changed meanwhile (now version {version}); what you entered is kept "
                    "below: check it and save again",
                )
            current = texts(spec)
            changes: dict[str, Any] = {
                f: value for f, value in entered.items() if value != current[f]
            }
            # Nothing changed still makes a version: the way to have a profile's agent built
            # again after its key changed where it is kept (docs/profiles.md, Keys).
            made = await profiles.set(name, changes or {"model": spec.model}, by=_by(viewer))
        except UnknownProfile:
            raise web.HTTPNotFound(text=f"no profile {name!r}") from None
        except (ProfileInvalid, ProfileConflict) as exc:
            await self._refuse(viewer, page, "change", exc, entered)
        raise web.HTTPSeeOther(f"{page}?saved={made.version}")

    async def rollback(self, request: web.Request) -> web.Response:
        viewer, profiles, form = await self._posted(request)
        name = _name(request)
        page = f"/ui/profiles/{name}"
        chosen = str(form.get("version", ""))
        try:
            if not chosen.isdigit() or len(chosen) > 9:
                raise ProfileInvalid("version", "a version number")
            made = await profiles.rollback(name, int(chosen), by=_by(viewer))
        except UnknownProfile:
            raise web.HTTPNotFound(text=f"no profile {name!r}") from None
        except (ProfileInvalid, ProfileConflict) as exc:
            await self._refuse(viewer, page, "rollback", exc, {})
        raise web.HTTPSeeOther(f"{page}?saved={made.version}")

    async def delete(self, request: web.Request) -> web.Response:
        viewer, profiles, _ = await self._posted(request)
        name = _name(request)
        try:
            await profiles.delete(name, by=_by(viewer))
        except UnknownProfile:
            raise web.HTTPNotFound(text=f"no profile {name!r}") from None
        except (ProfileInvalid, ProfileConflict) as exc:
            await self._refuse(viewer, f"/ui/profiles/{name}", "delete", exc, {})
        raise web.HTTPSeeOther("/ui/profiles")

    # -- bindings --------------------------------------------------------------------------

    async def bind(self, request: web.Request) -> web.Response:
        viewer, profiles, form = await self._posted(request)
        entered = _entered(form, ("target", "profile", "switchable"))
        switchable = tuple(
            part.strip() for part in entered.get("switchable", "").split(",") if part.strip()
        )
        try:
            await profiles.bind(
                entered.get("target", ""),
                entered.get("profile", "").strip(),
                by=_by(viewer),
                switchable=switchable,
            )
        except BindingInvalid as exc:
            await self._refuse(viewer, "/ui/profiles", "bind", exc, entered)
        raise web.HTTPSeeOther("/ui/profiles")

    async def unbind(self, request: web.Request) -> web.Response:
        viewer, profiles, form = await self._posted(request)
        target = str(form.get("target", ""))
        try:
            if not await profiles.unbind(target, by=_by(viewer)):
                raise BindingInvalid(f"target: no binding of {target[:60]!r}")
        except BindingInvalid as exc:
            await self._refuse(viewer, "/ui/profiles", "unbind", exc, {"target": target})
        raise web.HTTPSeeOther("/ui/profiles")


def _entry(v: ProfileVersion, current: int, deleted: bool) -> dict[str, Any]:
    """A row of a profile's history. A version that deleted it offers no rollback: the
    service refuses one, as what it held is the version before it."""
    return {
        "v": v,
        "fields": others(texts(ProfileSpec.from_json(v.spec)), skip=()),
        "current": v.version == current and not deleted,
        "restorable": v.version != current and v.change != DELETED,
    }


def _by(viewer: Viewer) -> str:
    """Who a change is recorded as made by: the signed-in identity, as the API records it."""
    return viewer.origin().sender_key


def add_routes(app: web.Application, pages: ProfilePages) -> None:
    app.router.add_get("/profiles", pages.index)
    app.router.add_post("/profiles", pages.create)
    app.router.add_get("/profiles/{name}", pages.profile)
    app.router.add_post("/profiles/{name}", pages.change)
    app.router.add_post("/profiles/{name}/rollback", pages.rollback)
    app.router.add_post("/profiles/{name}/delete", pages.delete)
    app.router.add_post("/bindings", pages.bind)
    app.router.add_post("/bindings/remove", pages.unbind)
