"""Durable shared subscription groups (`$share/{group}/{filter}`, issue 45): reads and writes of
what the broker keeps for them while they have no member."""
