"""Usage a tenant reads before the bill, storage metering, the throttling figures and words,
the quota page, the usage charts."""
