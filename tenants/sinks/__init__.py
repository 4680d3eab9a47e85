"""Sinks (issue 47): rule actions that deliver a rule's outputs to the tenant's own systems (S3,
SQS, Kinesis, a Postgres table, another MQTT broker, an HTTP endpoint in batches) through a
durable outbox. Their settings are rule actions (`common.contracts.rule_actions`); the rules job
writes the outbox and each sink's state (`tenants.models.sinks`); here the control plane reads
them (`selectors`) and tests a sink's connection (`services`, with `common.sinks`)."""
