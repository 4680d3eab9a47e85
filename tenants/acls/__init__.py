"""A tenant's ACL rules."""
