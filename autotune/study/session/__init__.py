"""One search from its call to its preset: the API, its options, context, clock and outside load."""
