"""The two kinds of cluster the engine can be built for (`gateway.engine.cluster`): one
instance alone (`one`), or several on one PostgreSQL archive and one Redis bus (`several`:
session leases and takeover in `ownership`, the other instances' tasks in `relay`)."""
