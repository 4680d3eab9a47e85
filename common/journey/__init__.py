"""The journey (what happened to every message and in every client's life): its
schema (`schema`) and its files, read, compacted and expired (`files`)."""
