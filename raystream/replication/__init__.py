"""Kafka's replication rules as pure code: ISR membership, high watermark, leader
election and divergence truncation. No Ray here: replica and controller actors call
these functions with the time and the state passed in, and tests check the rules
directly.
"""
