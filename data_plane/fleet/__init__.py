"""AWS IoT's fleet provisioning by claim, served by the broker (`service`)."""
