"""The client side: the typed HTTP client (``rest``), its view of the API's answers (``client_types``) and
the ``tide`` command (``cli``).

Contract: nothing here imports the server (``api.server``) or the scheduler (import-linter contracts), and
this package's ``__init__`` imports nothing, so the quick path (``api.client.cli.quick``) stays on the
standard library.
"""
