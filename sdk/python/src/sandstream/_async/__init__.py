# unasync: async only
"""The asyncio client, one module per surface; the source of `_sync/`, which
sdk/python/scripts/unasync.py writes from it (run it after every change here)."""
# unasync: sync only
# """The sync client, one module per surface, generated from `_async/`."""
# unasync: end
