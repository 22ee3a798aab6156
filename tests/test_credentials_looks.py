"""Anonymous callers are let in only while no token exists, as the archive says at a moment
after each call: callers asking together share one look at the archive, and a token issued
while a look is under way is still seen by every call made after it was issued. A token issued
a moment ago is known on its first use, by the same kind of shared look."""

from __future__ import annotations

import asyncio

from clock import FakeClock

from gateway.credentials import Credentials, IssuedToken, new_token


class Archive:
    """A token source whose reads can be held, counting them."""

    def __init__(self) -> None:
        self.tokens: list[IssuedToken] = []
        self.version = 0
        self.stamp_reads = 0
        self.hold: asyncio.Event | None = None
        self.reading = asyncio.Event()

    async def stamp(self) -> int:
        self.stamp_reads += 1
        version = self.version  # what the archive holds as the read begins
        self.reading.set()
        if self.hold is not None:
            await self.hold.wait()
        return version

    async def load(self) -> list[IssuedToken]:
        return list(self.tokens)

    def issue(self, name: str) -> None:
        self.tokens.append(new_token(name)[1])
        self.version += 1


def _credentials(archive: Archive) -> Credentials:
    return Credentials(
        shared="", local="local", source=archive, clock=FakeClock(), issued=[], stamp=0
    )


async def test_callers_asking_together_share_a_look() -> None:
    archive = Archive()
    credentials = _credentials(archive)
    answers = await asyncio.gather(*(credentials.admits_anonymous() for _ in range(50)))
    assert answers == [True] * 50
    assert archive.stamp_reads == 1  # fifty reads before


async def test_a_token_issued_while_a_look_is_under_way_is_seen_by_later_calls() -> None:
    archive = Archive()
    credentials = _credentials(archive)
    archive.hold = asyncio.Event()
    early = asyncio.ensure_future(credentials.admits_anonymous())
    await asyncio.wait_for(archive.reading.wait(), 5)  # its look has read the stamp: version 0
    archive.issue("bob")
    late = asyncio.ensure_future(credentials.admits_anonymous())  # asked after bob exists
    archive.hold.set()
    assert await asyncio.wait_for(late, 5) is False  # a look of its own, begun after bob
    await asyncio.wait_for(early, 5)  # either answer: it was asked before and after bob
    assert archive.stamp_reads == 2
    assert await credentials.admits_anonymous() is False  # a token is known: nothing read
    assert archive.stamp_reads == 2


async def test_a_token_issued_a_moment_ago_is_known_on_its_first_use() -> None:
    archive = Archive()
    credentials = _credentials(archive)
    # Known to have no tokens, and not due to look again: the clock does not move.
    assert await credentials.identify("agv_" + "x" * 43) is None
    token, issued = new_token("zed")
    archive.tokens.append(issued)
    archive.version += 1
    found = await credentials.identify(token)
    assert found is not None and found.key == "http:zed"
    reads = archive.stamp_reads
    # Unknown tokens asked together share one look; one of no issued shape needs none.
    forged = [credentials.identify("agv_" + str(n) * 43) for n in range(10)]
    assert await asyncio.gather(*forged) == [None] * 10
    assert archive.stamp_reads == reads + 1
    assert await credentials.identify("not-a-token") is None
    assert archive.stamp_reads == reads + 1


async def test_the_checks_of_one_request_share_a_look_begun_after_it_arrived() -> None:
    archive = Archive()
    credentials = _credentials(archive)
    with credentials.serving():
        assert await credentials.admits_anonymous() is True  # the authentication
        assert await credentials.admits_anonymous() is True  # the access check: no read
    assert archive.stamp_reads == 1
    # A look that began before a request arrived does not answer for it.
    archive.issue("bob")
    with credentials.serving():
        assert await credentials.admits_anonymous() is False
    assert archive.stamp_reads == 2


async def test_a_look_under_way_when_a_request_arrives_does_not_answer_for_it() -> None:
    archive = Archive()
    credentials = _credentials(archive)
    archive.hold = asyncio.Event()
    early = asyncio.ensure_future(credentials.admits_anonymous())
    await asyncio.wait_for(archive.reading.wait(), 5)  # read the stamp before bob existed
    archive.issue("bob")
    with credentials.serving():  # arrives after bob was issued
        late = asyncio.ensure_future(credentials.admits_anonymous())
        await asyncio.sleep(0)
        archive.hold.set()
        await asyncio.wait_for(early, 5)
        assert await asyncio.wait_for(late, 5) is False
    assert archive.stamp_reads == 2
