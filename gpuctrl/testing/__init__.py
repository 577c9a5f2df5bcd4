"""gpuctrl.testing: a real local control plane, a simulated kubelet and test helpers.

The Python counterpart of controller-runtime's envtest: etcd and kube-apiserver (optionally
kube-controller-manager and kube-scheduler) on loopback, simulated GPU nodes whose pods move
through a realistic lifecycle, a fake clock, and pytest fixtures.
"""

__all__: list[str] = []
