"""Tide's REST service and its client.

``api.server``: the service (``tide serve``: the FastAPI app, its routes and services, the engine it runs);
``api.client``: the typed HTTP client and the ``tide`` command, which import nothing of the server;
``api.shared``: pure code both sides use. import-linter contracts in pyproject.toml keep these apart.
"""
