"""The journey (where each message went): reads, words, display, links, upkeep."""
