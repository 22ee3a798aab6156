"""What an agent's model reads just before the new message, besides the conversation: older
messages recalled for it, what the asker asked the bot to remember, and the passages of
attached documents found for it; and the reply's sources line for what it cited."""

from __future__ import annotations

from gateway.agents.base import AgentContext
from gateway.knowledge.cited import knowledge_note, with_sources
from gateway.memory.recalled import recall_note
from gateway.memory.remembered import memory_note

__all__ = ["new_message_notes", "with_sources"]


def new_message_notes(ctx: AgentContext, sender: str) -> list[str]:
    """The notes, in the order a model reads them, none empty. The asker's memories are
    theirs alone: in a group, the next asker gets their own."""
    notes = (
        recall_note(ctx.recalled),
        memory_note(ctx.member_memories, sender),
        knowledge_note(ctx.knowledge),
    )
    return [note for note in notes if note]
