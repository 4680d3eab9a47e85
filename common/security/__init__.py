"""Secrets, keys and credentials: device secrets and API tokens (`secrets`),
secrets sealed at rest (`sealed`), the platform identities' tokens (`service_token`), shared
key files (`key_files`), device certificates and JWT passwords (`device_credentials`)."""
