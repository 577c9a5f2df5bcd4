"""The built-in workload pod templates, ``cuda.yaml`` and ``plugin.yaml`` (package data).

Each is a Jinja2 template of a Pod with the variables ``namespace``, ``node_name``, ``image``,
``image_pull_policy`` and ``runtime_class_name``. The operator copies their text into the
``gpuctrl-validator-workloads`` ConfigMap; the validator agent reads them from there.
"""
