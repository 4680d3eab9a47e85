"""Running the platform's processes: the table of processes (`processes`), the
embedded Postgres and Redis (`embedded`), the check of ports before binding (`port_check`),
one log format (`logs`), and stopping background tasks (`cancellation`)."""
