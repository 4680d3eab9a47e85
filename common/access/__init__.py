"""Who may do what: a tenant's ACL rules (`acl`) and the client-id patterns a
device may connect with (`client_id_pattern`)."""
