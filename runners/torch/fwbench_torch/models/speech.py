"""Speech models: defined here, once."""
