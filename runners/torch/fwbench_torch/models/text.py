"""Text models: defined here, once."""
