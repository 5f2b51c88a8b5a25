"""The store stage: run results as frames (the columns of every frame declared once, in schema), written to an
append-only results store that records its format version, and read back migrated to the current format."""
