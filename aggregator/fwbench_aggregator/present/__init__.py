"""The present stage: what people read. Terminal tables (rich), the report's files (CSV, Markdown, HTML) and every
plot (matplotlib, in plots alone)."""
