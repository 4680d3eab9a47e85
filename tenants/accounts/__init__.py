"""People's access to tenants: sign-up, memberships, API tokens, the login token, proof
of an account's email (`trust`) and the login throttles."""
