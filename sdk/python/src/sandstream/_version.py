"""The SDK's version, the repository's VERSION (scripts/set-version writes it here; hatchling
reads it from here into the package's metadata)."""

__version__ = "0.1.0"
