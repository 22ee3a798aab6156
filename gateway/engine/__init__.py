"""The engine: from a stored message to a delivered reply.

`Router` is its face, built with its parts by `assembly.assemble`; the other modules are those
parts, one concept each. What front-ends may use of it is named here, and they import it from
here: the router, read-only views of tasks and prompts, and the errors they answer with.
"""

from gateway.engine.dispatch import Subscription
from gateway.engine.errors import (
    MaybeStored,
    MessageTooLong,
    QueueFull,
    TaskNotFound,
    TooManyTasks,
)
from gateway.engine.journal import PromptKind
from gateway.engine.prompts import AlreadyAnswered, PromptError, PromptNotFound
from gateway.engine.router import Router
from gateway.engine.traffic import Traffic
from gateway.engine.views import Prompt, Submission, TaskStatus, TaskView

__all__ = [
    "AlreadyAnswered",
    "MaybeStored",
    "MessageTooLong",
    "Prompt",
    "PromptError",
    "PromptKind",
    "PromptNotFound",
    "QueueFull",
    "Router",
    "Submission",
    "Subscription",
    "TaskNotFound",
    "TaskStatus",
    "TaskView",
    "TooManyTasks",
    "Traffic",
]
