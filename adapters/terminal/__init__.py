"""`agenvoy chat`: a full-screen terminal window onto the running gateway.

The window talks to the gateway over its HTTP API and the session's event stream only; it
holds no router of its own. Each window has its own hash: the gateway binds the prompts of
the tasks it starts to it, and the window tells its own tasks from "foreign" ones (started
elsewhere on the same session) by the hash every event carries.
"""
