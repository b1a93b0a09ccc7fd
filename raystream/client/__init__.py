"""The clients: Producer, Consumer and Admin, and the connection to a cluster."""
