"""lakehouse package."""
