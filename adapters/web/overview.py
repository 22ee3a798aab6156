"""The console's pages across sessions: search, token usage with its charts, and health."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Final

from aiohttp import web

from adapters.http.context import Context
from adapters.http.paging import page_of, read_cursor
from adapters.web.charts import Series, lines, stacked_bars
from adapters.web.pages import Pages
from gateway.events import Origin
from gateway.ids import validate_session_id
from gateway.memory.embedders import EmbeddingFailed
from gateway.ownership import Need
from gateway.store.search import MAX_PAGE
from gateway.store.usage import DAY_MS

# What the archive keeps of usage (AGENVOY_USAGE_RETENTION_DAYS' default).
USAGE_DAYS: Final = 28
# Members and shared chats the usage page lists, the biggest spenders first.
USAGE_TOP: Final = 50
# Matches a page of word search shows (newest first; the next page goes on from the last).
SEARCH_PAGE: Final = 50
TOKEN_KINDS: Final = ("input", "output", "cache_read", "cache_write")


def _day_label(day: int) -> str:
    return datetime.fromtimestamp(day * DAY_MS / 1000, UTC).strftime("%m-%d")


@dataclass(frozen=True, slots=True)
class Found:
    """A search result as the page shows it."""

    session_id: str
    role: str
    sender: str
    send_at: int
    content: str
    score: float | None = None


class Overview:
    def __init__(self, ctx: Context, pages: Pages) -> None:
        self.ctx = ctx
        self.pages = pages

    async def search(self, request: web.Request) -> web.Response:
        viewer = await self.pages.viewer(request)
        query = request.query.get("q", "").strip()
        session = request.query.get("session", "").strip()
        semantic = request.query.get("mode") == "semantic"
        sid = validate_session_id(session) if session else None
        results: list[Found] = []
        problem = ""
        origin = viewer.origin()
        after: str | None = None
        if query and semantic:
            results, problem = await self._by_meaning(origin, query, sid)
        elif query:
            if sid is not None:
                await self.ctx.access.require(origin, sid, Need.read)
            before = read_cursor(request.query.get("after") or None, int)
            found = await self.ctx.store.search.messages(
                query,
                session_id=sid,
                limit=SEARCH_PAGE + 1,
                visible=await self.ctx.access.visibility(origin),
                before_id=None if before is None else int(before[0]),
            )
            shown, after = page_of(found, SEARCH_PAGE, lambda m: (m.id,))
            results = [Found(m.session_id, m.role, m.sender, m.send_at, m.content) for m in shown]
        return self.pages.render(
            "search.html",
            viewer,
            q=query,
            session=session,
            semantic=semantic,
            results=results,
            problem=problem,
            after=after,
            paged="after" in request.query,
        )

    async def _by_meaning(
        self, origin: Origin, query: str, sid: str | None
    ) -> tuple[list[Found], str]:
        """Semantic search of one session (best first), or why there is none."""
        memory = self.ctx.runtime.memory
        if sid is None:
            return [], "Searching by meaning looks in one session: name it."
        if memory is None:
            return [], "Searching by meaning is not available on this gateway."
        await self.ctx.access.require(origin, sid, Need.read)
        try:
            found = await memory.recall.search(sid, query, MAX_PAGE, summaries=True)
        except EmbeddingFailed as exc:
            return [], f"The embedding model did not answer ({exc}); try again shortly."
        return [
            Found(sid, r.role, r.sender, r.send_at, r.content, score=r.score) for r in found
        ], ""

    async def usage(self, request: web.Request) -> web.Response:
        viewer = await self.pages.viewer(request)
        caller = await self.ctx.access.caller(viewer.origin())
        # A gateway admin sees everyone's; anyone else what was spent for them.
        whose = None if caller.gateway_admin else caller.identities
        now = self.ctx.runtime.clock.now_ms()
        today = now // DAY_MS
        days = list(range(today - USAGE_DAYS + 1, today + 1))
        since = days[0] * DAY_MS
        rows = await self.ctx.store.usage.daily(since_ms=since, identities=whose)
        labels = [_day_label(day) for day in days]
        index = {day: i for i, day in enumerate(days)}
        per_model: dict[str, dict[str, list[float]]] = defaultdict(
            lambda: {kind: [0.0] * len(days) for kind in (*TOKEN_KINDS, "tps")}
        )
        for row in rows:
            values = per_model[row.usage.model]
            i = index[row.day]
            for kind in TOKEN_KINDS:
                values[kind][i] = float(getattr(row.usage, kind))
            values["tps"][i] = row.usage.output_tps
        charts = [
            (
                model,
                stacked_bars(
                    f"Tokens per day of {model}",
                    labels,
                    [Series(kind.replace("_", " "), values[kind]) for kind in TOKEN_KINDS],
                ),
            )
            for model, values in sorted(per_model.items())
        ]
        speed = lines(
            "Output tokens per second per day",
            labels,
            [Series(model, values["tps"]) for model, values in sorted(per_model.items())],
        )
        totals = await self.ctx.store.usage.summary(since_ms=since, identities=whose)
        # Per member and per shared chat: everyone's for an admin, else one's own spend.
        # The biggest spenders only, so the page does not grow with the members: everyone's,
        # a page at a time, is GET /v1/usage?by=identity.
        members = await self.ctx.store.usage.by_identity(
            since_ms=since, identities=whose, biggest=USAGE_TOP + 1
        )
        chats = await self.ctx.store.usage.by_chat(
            since_ms=since, identities=whose, biggest=USAGE_TOP + 1
        )
        return self.pages.render(
            "usage.html",
            viewer,
            charts=charts,
            speed=speed if per_model else None,
            rows=list(reversed(rows)),
            totals=totals,
            day_label=lambda day: datetime.fromtimestamp(day * DAY_MS / 1000, UTC).date(),
            days=USAGE_DAYS,
            everyone=whose is None,
            members=members[:USAGE_TOP],
            chats=chats[:USAGE_TOP],
            more_members=len(members) > USAGE_TOP,
            more_chats=len(chats) > USAGE_TOP,
            top=USAGE_TOP,
            priced=self.ctx.runtime.settings.prices is not None,
        )

    async def health(self, request: web.Request) -> web.Response:
        viewer = await self.pages.viewer(request)
        runtime = self.ctx.runtime
        ready = await runtime.readiness()
        running, queued = runtime.router.load()
        pushed, pulled = runtime.router.front_ends()
        return self.pages.render(
            "health.html",
            viewer,
            ready=ready,
            checks=[("database", ready.database), ("KV store", ready.kv), ("leases", ready.leases)],
            instance=runtime.settings.instance_id,
            agent=runtime.settings.agent,
            running=running,
            queued=queued,
            waiting=len(runtime.router.pending()),
            pushed=sorted(pushed),
            pulled=sorted(pulled),
            platforms=runtime.platforms.states(),
            embedder=runtime.memory.recall.embedder.label if runtime.memory else "none",
        )
