"""One search from its call to its preset: the API, its options, clock, state and outside load."""
