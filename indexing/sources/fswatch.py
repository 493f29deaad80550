"""The file-system watch both sources run on (watchfiles), and its failures, which they outlive.

watchfiles fails on any event whose path it cannot name as text: a file or folder whose name is not
UTF-8 read or listed by anyone (the watch's own start lists every folder under the watched one). That
ended a watch for the server's life. So the sources read no such file or folder (`utf8_name`), and
a failed watch is logged (once for each failure) and ends its `FileWatch.events` block quietly: the
source reads everything again, which catches up with what the watch missed, and watches anew.
"""

from __future__ import annotations

import logging
from contextlib import aclosing, asynccontextmanager
from pathlib import Path
from typing import AsyncIterator, Callable

import anyio
from watchfiles import Change, awatch
from watchfiles._rust_notify import WatchfilesRustInternalError

log = logging.getLogger(__name__)

DEBOUNCE_MS, STEP_MS = 1600, 50  # watchfiles: a burst is grouped until 50 ms pass without events
WAKE_MS = 250  # how soon the first (empty) batch tells the loop the OS watch is live
RETRY_S = 2.0  # after a failed watch
Changes = set[tuple[Change, str]]


def utf8_name(name: str) -> bool:
    """Whether a name read from the file system is UTF-8 (Python keeps other bytes as surrogates).
    Reading a file under another name makes the watch fail, so such files are not read at all."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class FileWatch:
    """watchfiles on one folder, watched anew by the caller's loop after each failure."""

    def __init__(self, folder: Path, watch_filter: Callable[[Change, str], bool], what: str) -> None:
        self.folder, self.watch_filter, self.what = folder, watch_filter, what
        self.failed = False
        self._said: set[str] = set()

    @asynccontextmanager
    async def events(self) -> AsyncIterator[AsyncIterator[Changes]]:
        """watchfiles' batches of changes: an empty one first once the OS watch is live, then one
        every WAKE_MS without changes. A folder it may not read is left out of the watch, where it failed
        the watch's start (the note watcher names it). When the watch fails, that is logged and the block ends."""
        self.failed = False
        try:
            async with aclosing(awatch(self.folder, watch_filter=self.watch_filter, debounce=DEBOUNCE_MS,
                                       step=STEP_MS, rust_timeout=WAKE_MS, yield_on_timeout=True,
                                       ignore_permission_denied=True)) as watching:
                yield watching
        except* WatchfilesRustInternalError as failed:  # e.g. a file whose name is not UTF-8 was read
            self.failed, problem = True, str(failed.exceptions[0])
            level = logging.DEBUG if problem in self._said else logging.WARNING
            self._said.add(problem)
            log.log(level, "%s %s: the file-system watch failed (%s); reading it all again and watching anew",
                    self.what, self.folder, problem)

    async def pause(self) -> None:
        """A moment before watching anew; RETRY_S after a failure: a folder named in bytes that are not
        UTF-8 fails every watch as it starts, and then the source reads everything every RETRY_S."""
        await anyio.sleep(RETRY_S if self.failed else WAKE_MS / 1000)
