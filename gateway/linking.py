"""Joining one person's identities across front-ends with a one-time code.

A person asks for a code where the answer is seen by them alone (the HTTP API, the terminal,
a Discord slash command's ephemeral answer, a private Telegram chat with the bot) and enters it
in another front-end: the identity that enters it joins the person who asked for it, and from
then on reads what that person reads. So a code is never shown where others could see it, is
good once and for `CODE_TTL_MS`, and is kept only as a hash; an identity holds at most
`LIVE_CODES` at a time and may enter `ATTEMPTS` wrong ones per `ATTEMPT_WINDOW_MS`, counted in
the archive: every instance sharing it counts the same guesses.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from typing import Final, Literal

from gateway.access import ANONYMOUS_KEY
from gateway.clock import Clock
from gateway.events import Origin
from gateway.store.ownership import Ownership

# 32 letters and digits, without the ones read as each other (0/O, 1/I): 10 of them are 50
# bits, far past what `ATTEMPTS` tries per identity could reach in a code's life.
ALPHABET: Final = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"
CODE_LENGTH: Final = 10
CODE_TTL_MS: Final = 10 * 60_000
LIVE_CODES: Final = 3
ATTEMPTS: Final = 5
ATTEMPT_WINDOW_MS: Final = 10 * 60_000

# The prefix of `Origin.reply_to` that Discord's front-end gives a slash command: its answer
# is the interaction's response, which can be shown to the one who asked alone.
INTERACTION_PREFIX: Final = "interaction:"

# Front-ends whose answers reach their caller alone.
_PRIVATE_PLATFORMS: Final = frozenset({"http", "terminal"})


class LinkRefused(Exception):
    """The code was not issued or not accepted; the message says why, `reason` what kind."""

    def __init__(
        self,
        message: str,
        reason: Literal["not_allowed", "bad_code", "too_many", "linked"],
        retry_after_ms: int = 0,
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.retry_after_ms = retry_after_ms


@dataclass(frozen=True, slots=True)
class IssuedCode:
    code: str  # as shown: two groups of five
    expires_at: int  # Unix ms


def answered_privately(who: Origin) -> bool:
    """Whether the answer to `who` is seen by them alone."""
    if who.platform in _PRIVATE_PLATFORMS:
        return True
    if who.platform == "telegram":
        # A private chat's id is its user's id; a group's is negative.
        return bool(who.sender_id) and who.channel_id == who.sender_id
    if who.platform == "discord":
        return who.reply_to.startswith(INTERACTION_PREFIX)
    return False


def where_to_ask(platform: str) -> str:
    if platform == "telegram":
        return "ask for a link code in a private chat with the bot"
    if platform == "discord":
        return "ask for a link code with the /link slash command: its answer is seen by you alone"
    return "ask for a link code where the answer is seen by you alone"


def normalized(code: str) -> str | None:
    """The code as kept (upper case, no separators); None when it cannot be one."""
    plain = "".join(code.split()).replace("-", "").upper()
    if len(plain) != CODE_LENGTH or any(c not in ALPHABET for c in plain):
        return None
    return plain


class Linking:
    def __init__(self, ownership: Ownership, clock: Clock) -> None:
        self._ownership = ownership
        self._clock = clock

    async def issue(self, who: Origin) -> IssuedCode:
        """A new code for `who`; refused where others would see it."""
        _check_linkable(who)
        if not answered_privately(who):
            raise LinkRefused(
                f"{where_to_ask(who.platform)}: whoever enters a code joins you and reads "
                "your sessions",
                "not_allowed",
            )
        plain = "".join(secrets.choice(ALPHABET) for _ in range(CODE_LENGTH))
        now = self._clock.now_ms()
        expires_at = now + CODE_TTL_MS
        await self._ownership.issue_code(
            who.sender_key, plain, expires_at=expires_at, now=now, keep=LIVE_CODES
        )
        half = CODE_LENGTH // 2
        return IssuedCode(f"{plain[:half]}-{plain[half:]}", expires_at)

    async def redeem(self, who: Origin, code: str) -> frozenset[str]:
        """Join `who` to the person who asked for `code`; that person's identities now."""
        _check_linkable(who)
        key = who.sender_key
        entry = await self._ownership.enter_code(
            key,
            normalized(code),
            now=self._clock.now_ms(),
            attempts=ATTEMPTS,
            window_ms=ATTEMPT_WINDOW_MS,
        )
        if entry.retry_after_ms:
            left = entry.retry_after_ms
            wait = (left + 59_999) // 60_000
            raise LinkRefused(f"too many wrong codes; try again in {wait} min", "too_many", left)
        issuer = entry.issuer
        if issuer is None:
            raise LinkRefused("that code is wrong, used or expired; ask for a new one", "bad_code")
        if issuer in await self._ownership.linked(key):
            raise LinkRefused("these identities are linked already", "linked")
        return await self._ownership.link(key, to=issuer, by=key)

    async def unlink(self, who: Origin) -> bool:
        """Take `who` out of the person it was joined with; False when it was alone."""
        return await self._ownership.unlink(who.sender_key, by=who.sender_key)

    async def linked(self, who: Origin) -> frozenset[str]:
        return await self._ownership.linked(who.sender_key)


def _check_linkable(who: Origin) -> None:
    if not who.sender_id or who.sender_key == ANONYMOUS_KEY:
        # Whoever reaches an open gateway is `http:anonymous`: it stands for nobody in
        # particular, so nobody may be joined to it.
        raise LinkRefused("sign in with a token to link identities", "not_allowed")


def describe(identities: frozenset[str], own: str) -> str:
    others = sorted(identities - {own})
    return ", ".join(others) if others else "none"
