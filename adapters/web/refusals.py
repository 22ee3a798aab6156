"""Refused console forms, shown again. Every form answers with a redirect (post/redirect/get);
a refused one is kept in the KV store for a few minutes under a random id the redirect names,
so that its page, on whichever instance serves it, shows the error, marks the field it names and
keeps what was entered — to the sign-in that sent it only."""

from __future__ import annotations

import hashlib
import hmac
import json
import re
import secrets
from dataclasses import dataclass
from typing import Final, NoReturn

from aiohttp import web

from adapters.web.auth import Viewer
from gateway.store.kv import KVStore

# How long a refused form waits for its page: a redirect is followed at once, and a reload a
# little later still shows what went wrong.
REFUSED_TTL_SECONDS: Final = 600
_KV_PREFIX: Final = "console:refused-form:"
_REFUSAL_ID: Final = re.compile(r"[A-Za-z0-9_-]{16,64}")


@dataclass(frozen=True, slots=True)
class Refusal:
    """A refused form as its page shows it again: which form, the error, the field it names,
    and what was entered."""

    form: str
    error: str
    field: str
    values: dict[str, str]


def _owner(viewer: Viewer) -> str:
    # A refused form is shown only to the sign-in that sent it.
    return hashlib.sha256(f"refused-form\n{viewer.csrf}".encode()).hexdigest()


class RefusedForms:
    def __init__(self, kv: KVStore) -> None:
        self.kv = kv

    async def refuse(
        self,
        viewer: Viewer,
        page: str,
        form: str,
        error: str,
        field: str,
        values: dict[str, str],
    ) -> NoReturn:
        """Keep the refusal and send the browser back to `page`, which shows it. `values`
        must hold nothing a page may not show."""
        record = {
            "owner": _owner(viewer),
            "page": page,
            "form": form,
            "error": error,
            "field": field,
            "values": values,
        }
        refusal_id = secrets.token_urlsafe(18)
        await self.kv.set(_KV_PREFIX + refusal_id, json.dumps(record), ttl=REFUSED_TTL_SECONDS)
        raise web.HTTPSeeOther(f"{page}?refused={refusal_id}")

    async def shown(self, viewer: Viewer, request: web.Request) -> Refusal | None:
        """The refused form this page's address names, if it is this viewer's and this page's
        (an id someone else's page showed, or an expired one, shows nothing)."""
        refusal_id = request.query.get("refused", "")
        if not _REFUSAL_ID.fullmatch(refusal_id):
            return None
        text = await self.kv.get(_KV_PREFIX + refusal_id)
        if text is None:
            return None
        record = json.loads(text)
        mine = hmac.compare_digest(str(record.get("owner", "")), _owner(viewer))
        if not mine or record.get("page") != request.path:
            return None
        values = {str(k): str(v) for k, v in dict(record.get("values", {})).items()}
        return Refusal(str(record["form"]), str(record["error"]), str(record["field"]), values)
