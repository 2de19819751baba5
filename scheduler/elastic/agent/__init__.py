"""What runs inside a replica's processes and a job's pods: standard library, httpx and torch only.

Contract (an import-linter contract keeps it so): nothing here imports the service (no database, web
framework, Kubernetes client or scheduling core), so a training image needs only ``pip install
tide-scheduler``, httpx and torch. ``pool`` keeps warm launchers, ``launcher`` is one (it imports torch),
``torchrun_agent`` plays torchrun's agent for a fixed-size launch, ``pod`` is Tide's agent in a job pod and
``link`` its connection to the service; ``procs`` reads ``/proc``, ``checkpoints`` the job's progress mark,
``ports`` finds a free port and ``trace`` records a resize's steps.
"""
