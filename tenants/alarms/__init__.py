"""Alarms (issue 46): a tenant's alarm definitions, the state of each (alarm, key) and the
transitions between states. The definitions' checks and the state machine are the pure core in
`common.alarms`; the live rules job (Spark) writes the states and transitions."""
