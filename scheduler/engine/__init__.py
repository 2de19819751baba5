"""The live control loop (``loop.Engine``): observe the executor, plan with the core, persist, apply.
Leader election in ``leader``, plan -> rows in ``persist``, rows <-> executor in ``reconcile``."""
