"""Requests safe to send again: the `Idempotency-Key` header of `POST /v1/send` and of making a
schedule, and the answer when nobody can tell whether a request was stored.

A key belongs to the caller's identity (its token), so two callers never meet on one; it holds
for 24 hours (gateway/store/request_keys.py). A repeat with the same request is answered with
what the first one made; with another request it is refused (422 `idempotency_mismatch`): the
key was spent, and answering the first request's result would pass for doing the second.
"""

from __future__ import annotations

from typing import Final

from adapters.http.errors import ApiError
from adapters.http.route import Call
from gateway.store.request_keys import KeptRequest, RequestKey

MISMATCH: Final = (
    "this Idempotency-Key was sent with another request within the last 24 hours; "
    "a new request needs a new key"
)


def request_key(call: Call, asked: object) -> RequestKey | None:
    """The request's key, if it has one, for a request asking `asked` (JSON-able: what makes
    two requests the same one)."""
    given = call.idempotency_key()
    if given is None:
        return None
    caller = call.origin().sender_key
    return RequestKey.of(caller, given, asked, call.ctx.runtime.clock.now_ms())


async def kept(call: Call, request: RequestKey | None) -> KeptRequest | None:
    """What the key's first request made, if it was stored; refused if it asked otherwise."""
    if request is None:
        return None
    found = await call.ctx.store.kept_request(request)
    if found is not None and found.fingerprint != request.fingerprint:
        raise ApiError(422, "idempotency_mismatch", MISMATCH)
    return found


def outcome_unknown(
    request: RequestKey | None, session_id: str = "", task_hash: str = ""
) -> ApiError:
    """503 for a request whose transaction's COMMIT got no answer: stored or not, nobody can
    tell yet. With a key, sending it again settles it; without, the task can be looked up."""
    task = f" as task {task_hash} of session {session_id}" if task_hash else ""
    if request is not None:
        advice = "send it again with the same Idempotency-Key: that answers with what was stored"
    elif task_hash:
        advice = f"look it up with GET /v1/session/{session_id}/task/{task_hash} (404: not stored)"
    else:
        advice = "look it up before sending it again"
    # The database answered a moment ago: it is worth asking again soon.
    headers = {"Retry-After": "1"}
    if task_hash:
        headers |= {"X-Agenvoy-Session": session_id, "X-Agenvoy-Task": task_hash}
    message = f"the database stopped answering while this was stored: it may be stored{task}; "
    return ApiError(503, "outcome_unknown", message + advice, headers)
