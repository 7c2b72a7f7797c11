"""The Kubernetes engine: Kubeflow's operators run the tasks; tfdist renders, validates and reads.

``backend`` (``KubernetesBackend``, through ``_kubectl``), ``tfjob`` (a spec as a
``kubeflow.org/v1`` TFJob), ``trainjob`` (as a Trainer v2 TrainJob) and ``katib`` (a tuning
spec as a Katib Experiment). The CRD schemas they validate against are in
``toolkit/jobs/schemas/``.
"""
