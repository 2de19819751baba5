"""A launch of an elastic job: generation G of a job at a fixed size N, its members, endpoint and run id.

Contract: ``launch`` (what a launch is, who is its master), ``environment`` (every variable a replica
process starts with: Tide's identity and torchrun's ``PET_*`` settings of a fixed-size launch) and
``torchrun_argv`` (reading a job's torchrun command) are pure: standard library only, no clock, I/O or
randomness. ``agent`` runs inside replica processes and job pods (the warm launchers, Tide's stand-in for
torchrun's agent, the pod agent and its link to the service): standard library, httpx and torch only.
"""
