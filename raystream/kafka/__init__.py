"""The Kafka-protocol listener: unmodified Kafka clients and tools against raystream.

Layout: :mod:`~raystream.kafka.listeners` parses the ``listeners`` settings,
:mod:`~raystream.kafka.codec` frames and (de)serializes Kafka messages through kio,
:mod:`~raystream.kafka.apis` is the table of supported APIs and their versions, each
handler translating a Kafka request into raystream's typed requests
(:mod:`raystream.requests`) and the answers back, and :mod:`~raystream.kafka.server`
is the asyncio TCP server. :class:`raystream.actors.kafka_listener.KafkaListener`, one
per Ray node, is the actor shell that runs it.
"""
