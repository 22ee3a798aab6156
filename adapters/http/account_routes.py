"""The routes of the caller's own account: who they are, their linked identities, and their
data on request (export and erasure). Part of the one route table (routes.py)."""

from __future__ import annotations

from typing import Final

from adapters.http.identities import (
    LinkCode,
    LinkRequest,
    Me,
    enter_link_code,
    get_me,
    issue_link_code,
    leave_links,
)
from adapters.http.me import ForgetRequest, Forgotten, MemberExport, export_me, forget_me
from adapters.http.route import Route

ACCOUNT_ROUTES: Final[tuple[Route, ...]] = (
    # -- the caller's own identity
    Route(
        "GET",
        "/v1/me",
        get_me,
        "Who the caller is: identity, name, linked identities, whether a gateway admin",
        caller=True,
        replies={200: Me},
        errors=(400,),
    ),
    Route(
        "POST",
        "/v1/me/link-code",
        issue_link_code,
        "A one-time code that links the identity entering it to the caller (10 minutes)",
        caller=True,
        replies={200: LinkCode},
        errors=(400,),
    ),
    Route(
        "POST",
        "/v1/me/link",
        enter_link_code,
        "Link the caller to the identity that asked for the code",
        body=LinkRequest,
        caller=True,
        replies={200: Me},
        errors=(400, 409, 413, 429),
    ),
    Route(
        "DELETE",
        "/v1/me/link",
        leave_links,
        "Take the caller out of the identities it is linked with",
        caller=True,
        replies={200: Me},
        errors=(400,),
    ),
    # -- the caller's own data
    Route(
        "GET",
        "/v1/me/export",
        export_me,
        "Everything stored about the caller (and identities linked with it), as one document",
        caller=True,
        replies={200: MemberExport},
        errors=(400,),
    ),
    Route(
        "POST",
        "/v1/me/forget",
        forget_me,
        "Erase what the caller wrote, and the replies to it, everywhere; needs confirm: true",
        body=ForgetRequest,
        caller=True,
        replies={200: Forgotten},
        errors=(400, 413),
    ),
)
