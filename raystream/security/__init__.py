"""Security of the Kafka-protocol listeners: authentication, ACLs and quotas."""
