"""collectors package."""
