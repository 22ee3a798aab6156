"""Agent profiles: named agent configurations kept in the archive, versioned, and bound to
places (a Discord channel, a Telegram topic, an HTTP identity, a session prefix…), so that
each task is answered by the agent its place is bound to.

Modules: `spec` (what a profile holds and how a change is checked), `keys` (where a profile's
key comes from: an environment variable or a secrets-file entry, never the archive),
`bindings` (binding kinds and which one wins for a task), `service` (the built-in `default`,
changes, the snapshot each task resolves against) and `agents` (the agents built per profile
version, cached and closed).
"""
