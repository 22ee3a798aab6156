"""Agent profiles and their bindings over HTTP, for gateway admins: list, show, change (a new
version), history, rollback; bind, unbind, list bindings (gateway/profiles). A profile's key
appears only as the reference it is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Annotated, Any, Final, Literal, TypeVar

from pydantic import Field

from adapters.http.errors import ApiError
from adapters.http.models import Query, RequestBody
from adapters.http.replies import Reply, UnixMs
from adapters.http.route import Call, Route
from gateway.profiles.bindings import Binding, BindingInvalid
from gateway.profiles.service import Profiles, UnknownProfile
from gateway.profiles.spec import ProfileInvalid, ProfileSpec
from gateway.store.profiles import ProfileConflict

T = TypeVar("T")
Names = Annotated[list[Annotated[str, Field(max_length=100)]], Field(max_length=64)]


class ProfileFields(Reply):
    agent: str
    model: str
    base_url: str
    key: str = Field(description="Where the key is: env:NAME or file:NAME (never a key).")
    persona: str
    reasoning: str
    allowed_tools: list[str]
    mcp_servers: list[str]
    history_window: int | None
    fallbacks: list[str]
    budgets: dict[str, int] = Field(
        description="Tokens per member a day and a month (tokens_day, tokens_month), held "
        "before each model call of the tasks this profile answers."
    )


class ProfileInfo(Reply):
    name: str
    version: int = Field(description="0 for `default`, the environment's configuration.")
    fields: ProfileFields


class ProfileList(Reply):
    profiles: list[ProfileInfo]


class ProfileVersionInfo(Reply):
    version: int
    changed_by: str
    changed_at: UnixMs
    change: str
    fields: ProfileFields


class ProfileHistory(Reply):
    name: str
    versions: list[ProfileVersionInfo]


class ProfileChange(RequestBody):
    """The fields to change; those left out keep their value."""

    agent: Literal["offline", "openai", "claude", "claude-code"] | None = None
    model: Annotated[str, Field(max_length=200)] | None = None
    base_url: Annotated[str, Field(max_length=500)] | None = None
    key: Annotated[str, Field(max_length=140)] | None = Field(
        None, description="env:NAME or file:NAME; a value that looks like a key is refused."
    )
    persona: Annotated[str, Field(max_length=16_000)] | None = None
    reasoning: Literal["", "low", "medium", "high"] | None = None
    allowed_tools: Names | None = None
    mcp_servers: Names | None = None
    history_window: Annotated[int, Field(ge=1, le=1000)] | None = None
    fallbacks: Names | None = None
    budgets: Annotated[dict[str, Annotated[int, Field(ge=0)]], Field(max_length=64)] | None = None


class RollbackRequest(RequestBody):
    version: Annotated[int, Field(ge=1, le=2**31 - 1)]


class BindingInfo(Reply):
    target: str = Field(description="KIND:KEY, e.g. discord-channel:123.")
    profile: str
    switchable: list[str]
    bound_by: str
    bound_at: UnixMs


class BindingList(Reply):
    bindings: list[BindingInfo]


TARGET = Field(
    pattern=r"^[a-z-]{2,20}:\S{1,240}$",
    description="KIND:KEY, e.g. discord-channel:123, telegram-topic:-100:7, identity:http:ann.",
)


class BindRequest(RequestBody):
    target: str = TARGET
    profile: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,39}$")
    switchable: Names = Field(default_factory=list)


class UnbindQuery(Query):
    target: str = TARGET


class Deleted(Reply):
    name: str
    version: int = Field(description="The version that records the deletion.")
    deleted: Literal[True] = True


class Unbound(Reply):
    unbound: Literal[True] = True


async def _admin(call: Call) -> Profiles:
    if not await call.ctx.access.is_gateway_admin(call.origin()):
        raise ApiError(403, "forbidden", "only gateway admins manage agent profiles")
    profiles = call.ctx.runtime.profiles
    if profiles is None:
        raise ApiError(404, "not_found", "agent profiles are not served here")
    return profiles


async def _checked(work: Awaitable[T]) -> T:
    try:
        return await work
    except (ProfileInvalid, BindingInvalid) as exc:
        raise ApiError(400, "bad_request", str(exc)) from None
    except UnknownProfile as exc:
        raise ApiError(404, "not_found", str(exc)) from None
    except ProfileConflict as exc:
        raise ApiError(409, "conflict", str(exc)) from None


def _fields(spec: ProfileSpec) -> ProfileFields:
    return ProfileFields(**spec.shown())


def _binding(b: Binding) -> BindingInfo:
    return BindingInfo(
        target=b.target,
        profile=b.profile,
        switchable=list(b.switchable),
        bound_by=b.bound_by,
        bound_at=b.bound_at,
    )


def _name(call: Call) -> str:
    return call.request.match_info["profile"]


async def list_profiles(call: Call) -> ProfileList:
    profiles = await _admin(call)
    shown = []
    for name in await profiles.names():
        version, spec = await profiles.get(name)
        shown.append(ProfileInfo(name=name, version=version, fields=_fields(spec)))
    return ProfileList(profiles=shown)


async def get_profile(call: Call) -> ProfileInfo:
    profiles, name = await _admin(call), _name(call)
    version, spec = await _checked(profiles.get(name))
    return ProfileInfo(name=name, version=version, fields=_fields(spec))


async def set_profile(call: Call) -> ProfileInfo:
    profiles, name = await _admin(call), _name(call)
    body = await call.body(ProfileChange)
    changes: dict[str, Any] = {f: getattr(body, f) for f in body.model_fields_set}
    who = call.origin().sender_key
    made = await _checked(profiles.set(name, changes, by=who))
    spec = ProfileSpec.from_json(made.spec)
    return ProfileInfo(name=name, version=made.version, fields=_fields(spec))


async def profile_history(call: Call) -> ProfileHistory:
    profiles, name = await _admin(call), _name(call)
    versions = await _checked(profiles.history(name))
    return ProfileHistory(
        name=name,
        versions=[
            ProfileVersionInfo(
                version=v.version,
                changed_by=v.changed_by,
                changed_at=v.changed_at,
                change=v.change,
                fields=_fields(ProfileSpec.from_json(v.spec)),
            )
            for v in versions
        ],
    )


async def rollback_profile(call: Call) -> ProfileInfo:
    profiles, name = await _admin(call), _name(call)
    body = await call.body(RollbackRequest)
    made = await _checked(profiles.rollback(name, body.version, by=call.origin().sender_key))
    spec = ProfileSpec.from_json(made.spec)
    return ProfileInfo(name=name, version=made.version, fields=_fields(spec))


async def delete_profile(call: Call) -> Deleted:
    profiles, name = await _admin(call), _name(call)
    made = await _checked(profiles.delete(name, by=call.origin().sender_key))
    return Deleted(name=name, version=made.version)


async def list_bindings(call: Call) -> BindingList:
    profiles = await _admin(call)
    return BindingList(bindings=[_binding(b) for b in await profiles.bindings()])


async def bind(call: Call) -> BindingInfo:
    profiles = await _admin(call)
    body = await call.body(BindRequest)
    made = await _checked(
        profiles.bind(
            body.target,
            body.profile,
            by=call.origin().sender_key,
            switchable=tuple(body.switchable),
        )
    )
    return _binding(made)


async def unbind(call: Call) -> Unbound:
    profiles = await _admin(call)
    target = call.query(UnbindQuery).target
    if not await _checked(profiles.unbind(target, by=call.origin().sender_key)):
        raise ApiError(404, "not_found", "no such binding")
    return Unbound()


Handler = Callable[[Call], Awaitable[Any]]
PROFILE = "/v1/profiles/{profile}"
PROFILE_ROUTES: Final[tuple[Route, ...]] = (
    Route("GET", "/v1/profiles", list_profiles, "Agent profiles (gateway admins)",
          caller=True, replies={200: ProfileList}, errors=(400,)),
    Route("GET", PROFILE, get_profile, "One agent profile's current version (gateway admins)",
          caller=True, replies={200: ProfileInfo}, errors=(400, 404)),
    Route("PUT", PROFILE, set_profile,
          "Make or change an agent profile: a new version (gateway admins)",
          body=ProfileChange, caller=True, replies={200: ProfileInfo}, errors=(400, 409, 413)),
    Route("DELETE", PROFILE, delete_profile,
          "Delete an agent profile: a version that says so, its history kept (gateway admins)",
          caller=True, replies={200: Deleted}, errors=(400, 404, 409)),
    Route("GET", f"{PROFILE}/history", profile_history,
          "Every version of an agent profile: who, when, what (gateway admins)",
          caller=True, replies={200: ProfileHistory}, errors=(400, 404)),
    Route("POST", f"{PROFILE}/rollback", rollback_profile,
          "A new version holding an older version's fields (gateway admins)",
          body=RollbackRequest, caller=True, replies={200: ProfileInfo},
          errors=(400, 404, 409, 413)),
    Route("GET", "/v1/bindings", list_bindings, "Where each profile answers (gateway admins)",
          caller=True, replies={200: BindingList}, errors=(400,)),
    Route("PUT", "/v1/bindings", bind, "Bind a place or caller to a profile (gateway admins)",
          body=BindRequest, caller=True, replies={200: BindingInfo}, errors=(400, 413)),
    Route("DELETE", "/v1/bindings", unbind, "Remove a binding (gateway admins)",
          query=UnbindQuery, caller=True, replies={200: Unbound}, errors=(400, 404)),
)  # fmt: skip
