"""Security of the Kafka-protocol listener: who a connection is, and what it may do.

Pure modules, imported on demand (this package imports nothing itself, so importing
``raystream`` stays cheap): :mod:`~raystream.security.principal` (principal names and
Kafka's ``ssl.principal.mapping.rules``), :mod:`~raystream.security.scram` (SCRAM
credentials and the server side of RFC 5802), :mod:`~raystream.security.sasl` (the
server state machines of PLAIN, SCRAM and OAUTHBEARER), :mod:`~raystream.security.
oauth` (token validators) and :mod:`~raystream.security.tls` (the listener's TLS
context, reloaded when its files change).
"""
