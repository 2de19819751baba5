"""Persistence: SQLAlchemy rows (``models``), the one row -> core mapper (``mapper``), shared queries,
engines and sessions (``db``, never created at import) and migrations (``migrate``, from ``migrations/``)."""
