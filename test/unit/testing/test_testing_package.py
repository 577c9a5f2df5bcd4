"""gpuctrl.testing's public surface and what it does without a control plane."""

from __future__ import annotations

import ssl

import pytest
from cryptography import x509

from gpuctrl.testing import ControlPlane, ControlPlaneError
from gpuctrl.testing._pki import write_pki


async def test_missing_binaries_name_the_folder_and_the_script(tmp_path):
    (tmp_path / "etcd").write_text("")
    with pytest.raises(ControlPlaneError) as error:
        async with ControlPlane(assets_dir=tmp_path):
            pass
    message = str(error.value)
    assert str(tmp_path) in message
    assert "python -m gpuctrl.testing.envtest" in message
    assert "etcd, kube-apiserver, kube-controller-manager, kube-scheduler" in message


def test_serving_certificate_chains_to_the_ca_for_loopback(tmp_path):
    pki = write_pki(tmp_path)
    ca = x509.load_pem_x509_certificate(pki.ca_file.read_bytes())
    serving = x509.load_pem_x509_certificate(pki.serving_cert_file.read_bytes())
    serving.verify_directly_issued_by(ca)
    names = serving.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert "kubernetes.default.svc" in names.get_values_for_type(x509.DNSName)
    assert "127.0.0.1" in [str(ip) for ip in names.get_values_for_type(x509.IPAddress)]
    context = ssl.create_default_context(cafile=str(pki.ca_file))  # the CA loads as a trust root
    context.load_cert_chain(pki.serving_cert_file, pki.serving_key_file)
