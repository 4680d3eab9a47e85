"""Fleet provisioning by claim: provisioning templates, the fleet CA, its certificates."""
