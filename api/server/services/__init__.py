"""What the routes do to the store: the queries and state changes behind ``/api/v1``, shared by its routes.

Contract: routes (``api.server.routes``) parse a request, authorise it where the check needs no row, call
these functions and shape the answer; the functions read and change rows in the session or service they
are given and raise ``HTTPException`` with a sentence that says what to fix, as the routes answer it. A
route never imports another route: what two routes share is here. ``projects``: finding a project, its
live figures, quota changes (projects and departments); ``jobs``: submitting, cancelling, checkpoints.
"""
