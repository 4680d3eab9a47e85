"""What the broker holds for a tenant: sessions, queues, retained messages, topics."""
