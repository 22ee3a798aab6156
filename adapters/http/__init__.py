"""The HTTP front-end: a JSON API and server-sent event streams on aiohttp.web.

Every route is under `/v1/` except `/healthz`, `/metrics` and `/openapi.json`. Bodies and
answers are JSON; an error is always `{"error": {"code": ..., "message": ...}}` with a
matching status. Once a token is configured or issued, every route but `/healthz` needs
`Authorization: Bearer <token>`; `start_http` refuses to listen beyond loopback without one.

Who is asking is what the bearer token says (`identity.py`, gateway/credentials.py), never a
header; `guard.py` keeps browsers from other sites out. When the server shuts down, long-polls
answer 503 `restarting` and streams end with a `restarting` frame.

Events reach HTTP clients through the task stream (`POST /v1/send` with `stream`), the task
route and the session log stream: the router pushes nothing to `http` and `terminal`
origins. The event contract and the SSE framing are in docs/events.md.

Where things are:
- `routes.py`: every operation in one table (method, path, handler, what it reads and
  answers); `route.py`: what a table entry is and how it is served.
- `models.py` (what comes in) and `replies.py` (what goes out): the pydantic models;
  `inputs.py` reads requests into them; `openapi.py` generates the document from them.
- One module per resource: `sessions.py`, `send.py`, `prompts.py` (tasks and prompts),
  `archive.py` (history, log stream, usage), `search.py` (full-text and semantic search),
  `operations.py` (health, metrics, the document).
- `app.py` builds and starts the app (`server.py` is the server under it); `context.py` is
  what its handlers share; `binding.py`, `identity.py`, `guard.py`, `errors.py`, `metrics.py`
  and `sse.py` are its middlewares and helpers.
"""

from adapters.http.app import HttpAdapter, build_app, create, start_http
from adapters.http.binding import InsecureBinding, check_binding, is_loopback
from adapters.http.sse import sse_frame

__all__ = [
    "HttpAdapter",
    "InsecureBinding",
    "build_app",
    "check_binding",
    "create",
    "is_loopback",
    "sse_frame",
    "start_http",
]
