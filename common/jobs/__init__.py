"""AWS IoT Jobs, as both planes speak it: the reserved topics (`topics`) and the documents,
errors and state transitions of job executions (`executions`); the contract by which the
control plane has a broker publish its notifications (`announcements`)."""
