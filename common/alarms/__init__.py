"""Alarms (issue 46): a condition that must hold a while, a device gone silent, raised once,
acknowledged by a person and cleared — per tenant, per key.

- `definition`: a definition checked and compiled into one rule of the rules' dialect, whose
  output for a message is a `Reading` (key, raises, clears, value).
- `machine`: each key's state as pure functions of readings, acknowledgements and time; the
  live job and the preview over history both run it, so they agree.

Like `common.rules`, this package imports only the stdlib and `common.*`.
"""
