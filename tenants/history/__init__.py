"""The archive's history per tenant: policies (writes, reads) and retention."""
