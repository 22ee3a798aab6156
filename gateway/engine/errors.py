"""What the engine refuses with: a message too long, too many tasks, an unknown task; and a
message whose storing nobody can confirm."""

from __future__ import annotations


class MessageTooLong(ValueError):
    def __init__(self, length: int, limit: int) -> None:
        super().__init__(f"message is {length} characters; the limit is {limit}")
        self.length, self.limit = length, limit


class TaskNotFound(LookupError):
    pass


class TooManyTasks(RuntimeError):
    """The sender has as many tasks waiting or running as one sender may; nothing was stored."""

    code = "too_many_requests"
    retry_after: int | None = 10  # seconds a caller is told to wait; None: no telling

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"too many requests: you have {limit} tasks waiting or running; "
            "send more once some are answered"
        )
        self.limit = limit


class QueueFull(TooManyTasks):
    """The session has as many tasks waiting as one session may; nothing was stored."""

    def __init__(self, limit: int) -> None:
        RuntimeError.__init__(
            self,
            f"this conversation has {limit} messages waiting for the bot already; "
            "send more once some are answered",
        )
        self.limit = limit


class QuotaExceeded(TooManyTasks):
    """A quota or budget was reached (gateway/quotas.py); nothing was stored. `retry_after` is
    None for a limit that does not reset by itself (sessions owned)."""

    def __init__(self, code: str, message: str, retry_after: int | None) -> None:
        RuntimeError.__init__(self, message)
        self.code, self.retry_after, self.limit = code, retry_after, 0


class MaybeStored(RuntimeError):
    """The database connection ended while the message's transaction was being committed: it
    may be stored, as task `task_hash` of `session_id` (run once the gateway finds its
    journal), or not at all."""

    def __init__(self, session_id: str, task_hash: str) -> None:
        super().__init__(f"the message may or may not be stored, as task {task_hash}")
        self.session_id, self.task_hash = session_id, task_hash
