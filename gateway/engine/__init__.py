"""The engine: from a stored message to a delivered reply.

`router.Router` is its face; the other modules are its parts, one concept each.
"""
