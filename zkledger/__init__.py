"""zkledger package."""
