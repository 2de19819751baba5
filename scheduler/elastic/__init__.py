"""A launch of an elastic job: generation G of a job at a fixed size N, its members, endpoint, run id and
restart budget.

Contract: ``launch`` (what a launch is, who is its master), ``environment`` (every variable a replica
process starts with: Tide's identity and torchrun's ``PET_*`` settings of a fixed-size launch),
``torchrun_argv`` (reading a job's torchrun command) and ``policy`` (the restart budget: restart or fail)
are pure: standard library only, no clock, I/O or randomness. The engine runs launches through
``coordinator``, which picks the strategy an executor's capabilities declare: ``restarts`` (coordinated
restarts of processes, the local executor) or ``inplace`` (agents relaunching in their pods, Kubernetes);
both honour a shrink's preemption notice (``notice``) and restart a launch through
``scheduler.store.lifecycle``. ``agent`` runs inside replica processes and job pods (the warm launchers,
Tide's stand-in for torchrun's agent, the pod agent and its link to the service): standard library, httpx
and torch only.
"""
