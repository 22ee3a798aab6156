"""What the archive raises when it cannot be reached, for front-ends to answer plainly."""

from __future__ import annotations


class DatabaseUnavailable(RuntimeError):
    """No working connection to the database: it refused, ended or stopped answering ours.
    Nothing of the work that raised it was committed; the same work may be tried again."""
