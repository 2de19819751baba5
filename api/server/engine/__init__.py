"""The API's link to the scheduling engine: the engine's own process (``host``), the API's handle on it
(``link``) and the messages between the two (``wire``).
"""
