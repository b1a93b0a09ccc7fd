"""Transactions: the coordinator's state machine, its internal topic, and markers.

Pure logic (no Ray): :mod:`~raystream.transactions.metadata` holds the rules of a
transactional id's life, :mod:`~raystream.transactions.state_topic` the records of
``__transaction_state``, :mod:`~raystream.transactions.markers` the control batches
that end a transaction on a partition.
"""
