"""Pieces of the Kubernetes executor (``scheduler.executors.kubernetes``), each small and testable alone:
``names`` (object names and labels), ``podspec`` (Pod and Service bodies), ``podtemplate`` (a job's pod
template and an admin's pod defaults: checked and merged), ``status`` (a pod as an ``Observation``),
``retry`` (backoff and error classes), ``reflector`` (list + watch, resumed and relisted), ``inventory``
(Node objects as the core's nodes), ``config`` (in-cluster or kubeconfig)."""
