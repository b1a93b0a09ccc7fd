"""State stores for streams tasks: key-value, window and session stores.

Each store is local to one task, lives on disk, and records every change so that the
task can write it to the store's compacted changelog topic; a task that moves rebuilds
its stores from that changelog before it processes anything.
"""
