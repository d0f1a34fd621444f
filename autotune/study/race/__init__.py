"""The finalist race: the best few configs measured again side by side, and how it decides."""
