"""A tenant's devices: credentials, certificates and JWT keys (`identity`), presence,
why a connection ended, first-device snippets (`onboarding`)."""
