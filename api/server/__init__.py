"""The service: the FastAPI app, its routes and parts, and the engine it runs (``tide serve``).

Contract: everything that answers HTTP or runs the scheduling engine for the API lives here; the client
(``api.client``) imports nothing of it (an import-linter contract), so every ``tide`` command starts fast.
"""
