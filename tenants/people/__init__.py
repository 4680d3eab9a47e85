"""A tenant's people: invitations by email with a role, accepting them, removing members."""
