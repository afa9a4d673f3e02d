"""The two stages of a listing: the next page is requested while this one's fetches and the
previous one's commit run.

At a rate limit every moment the client asks for nothing is lost, so the next list page is
requested as soon as this one arrives (its anchor depends on this page alone), and page k commits
on a worker thread while page k+1's threads are fetched. Commits stay strictly in page order, one
at a time, so the store and the cursor move exactly as in a sequential sync, and a kill -9 finds
the same states.
"""

import asyncio
from collections.abc import Callable

from gitlab_knowledge.gitlab.paging import Page


class PagePipeline:
    def __init__(self, first: "asyncio.Task[Page]") -> None:
        self.listing: asyncio.Task[Page] | None = first
        self._committing: asyncio.Future[None] | None = None
        self._settled: Callable[[], None] = lambda: None  # what follows the commit in flight

    def request(self, listing: "asyncio.Task[Page]") -> None:
        self.listing = listing

    async def next_page(self) -> Page:
        assert self.listing is not None
        page, self.listing = await self.listing, None
        return page

    async def commit(self, work: Callable[[], None], settled: Callable[[], None]) -> None:
        """Wait for the previous page's commit, then start `work` on a worker thread; `settled`
        runs once it has finished."""
        await self.settle()
        self._committing = asyncio.ensure_future(asyncio.to_thread(work))
        self._settled = settled

    async def settle(self) -> None:
        """Wait for the commit in flight, if any (its failure propagates)."""
        if self._committing is None:
            return
        await self._committing
        self._committing = None
        self._settled()

    async def close(self) -> None:
        """Stop a listing request in flight and wait for a commit in flight."""
        if self.listing is not None:
            self.listing.cancel()
            await asyncio.wait([self.listing])
        if self._committing is not None:
            # A commit on its thread cannot be cancelled; whatever brought us here propagates
            # once it has finished, and its own failure, if any, is not left unretrieved.
            await asyncio.wait([self._committing])
            if not self._committing.cancelled():
                self._committing.exception()
