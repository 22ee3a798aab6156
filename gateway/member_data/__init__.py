"""Each member's data on request: the export and the erasure (`service`), the session files'
part of an erasure (`files`), and the chat commands (`commands`)."""
