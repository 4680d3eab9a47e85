"""A tenant's rules: writes and reads, the SQL check (`sql`), runs over history (`runs`)."""
