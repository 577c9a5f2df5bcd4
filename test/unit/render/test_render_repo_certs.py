"""certConfig keys: PEM certificates only; expired or expiring within 30 days is a warning."""

from datetime import UTC, datetime, timedelta

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from hypothesis import example, given, settings
from hypothesis import strategies as st

from api.v1alpha1 import load_cluster_policy
from controllers.render import (
    ClusterFacts,
    ConfigMapFacts,
    NodeFacts,
    check_repo_config,
    next_certificate_change,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
_KEY = ec.generate_private_key(ec.SECP256R1())


def _pem(common_name: str, not_before: datetime, not_after: datetime) -> str:
    name = x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Site"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )
    certificate = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(_KEY.public_key())
        .serial_number(1)
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .sign(_KEY, hashes.SHA256())
    )
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


GOOD = _pem("Site CA", NOW - timedelta(days=365), NOW + timedelta(days=365))


def _check(data: dict[str, str], now: datetime = NOW) -> list[str]:
    policy = load_cluster_policy({"spec": {"driver": {"certConfig": {"name": "certs"}}}})
    node = NodeFacts(
        name="n",
        labels={
            "nvidia.com/gpu.present": "true",
            "feature.node.kubernetes.io/system-os_release.ID": "ubuntu",
            "feature.node.kubernetes.io/system-os_release.VERSION_ID": "22.04",
        },
    )
    facts = ClusterFacts(nodes=(node,), config_maps=(ConfigMapFacts(name="certs", data=data),))
    return [str(p) for p in check_repo_config(policy, facts, now=now)]


def _where(key: str, line: int) -> str:
    return f"ConfigMap 'certs' key '{key}' line {line}"


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(GOOD, [], id="one-certificate"),
        pytest.param("# site bundle\n" + GOOD + "\n" + GOOD, [], id="bundle-with-comment"),
        pytest.param(
            "not a certificate\n",
            [
                f"error: {_where('ca.crt', 1)}: no PEM certificate (-----BEGIN CERTIFICATE-----) "
                "found"
            ],
            id="not-pem",
        ),
        pytest.param(
            "\n"
            + _KEY.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            ).decode(),
            [f"error: {_where('ca.crt', 2)}: a PRIVATE KEY block, not a CERTIFICATE"],
            id="private-key",
        ),
        pytest.param(
            GOOD + "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
            [f"error: {_where('ca.crt', len(GOOD.splitlines()) + 1)}: not a valid certificate"],
            id="second-block-corrupt",
        ),
        pytest.param(
            GOOD.rsplit("-----END", 1)[0],
            [
                f"error: {_where('ca.crt', 1)}: -----BEGIN CERTIFICATE----- has no "
                "-----END CERTIFICATE-----"
            ],
            id="truncated",
        ),
        pytest.param(
            _pem("Old CA", NOW - timedelta(days=800), datetime(2026, 11, 30, 8, 0, tzinfo=UTC)),
            [
                f"warning: {_where('ca.crt', 1)}: certificate 'CN=Old CA,O=Site' expired on "
                "2026-11-30 08:00:00 UTC"
            ],
            id="expired",
        ),
        pytest.param(
            _pem("Soon CA", NOW - timedelta(days=800), datetime(2026, 12, 29, 0, 0, tzinfo=UTC)),
            [
                f"warning: {_where('ca.crt', 1)}: certificate 'CN=Soon CA,O=Site' expires on "
                "2026-12-29 00:00:00 UTC, within 30 days"
            ],
            id="expiring",
        ),
        pytest.param(
            _pem("Future CA", datetime(2027, 1, 1, tzinfo=UTC), NOW + timedelta(days=900)),
            [
                f"warning: {_where('ca.crt', 1)}: certificate 'CN=Future CA,O=Site' is not "
                "valid before 2027-01-01 00:00:00 UTC"
            ],
            id="not-yet-valid",
        ),
    ],
)
def test_cert_config_keys(text: str, expected: list[str]) -> None:
    problems = _check({"ca.crt": text})
    assert len(problems) == len(expected), problems
    for problem, start in zip(problems, expected, strict=True):
        assert problem.startswith(start), problem


def test_every_key_is_checked_errors_first() -> None:
    expired = _pem("Old", NOW - timedelta(days=9), NOW - timedelta(days=1))
    assert [
        p.split(":")[0] + " " + p.split("'")[3]
        for p in _check({"a.crt": expired, "b.crt": "junk", "c.crt": GOOD})
    ] == ["error b.crt", "warning a.crt"]


@settings(max_examples=40, deadline=None)
@given(st.integers(min_value=-100, max_value=100))
def test_the_warning_follows_the_injected_now(days_left: int) -> None:
    after = datetime(2027, 6, 1, tzinfo=UTC)
    text = _pem("CA", after - timedelta(days=1000), after)
    problems = _check({"ca.crt": text}, now=after - timedelta(days=days_left, seconds=1))
    if days_left < 0:
        assert [p for p in problems if "expired on 2027-06-01" in p] == problems != []
    elif days_left < 30:
        assert [p for p in problems if "within 30 days" in p] == problems != []
    else:
        assert problems == []


def test_on_apt_nodes_a_certificate_key_must_end_in_crt() -> None:
    assert _check({"site.pem": GOOD}) == [
        "warning: ConfigMap 'certs' key 'site.pem': update-ca-certificates on ubuntu and debian "
        "takes only *.crt files from /usr/local/share/ca-certificates, so it ignores this one"
    ]


_BASE64 = st.text(alphabet="ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/=\n")


@settings(max_examples=200)
@given(st.one_of(st.text(max_size=200), _BASE64), st.sampled_from(["CERTIFICATE", "X", ""]))
def test_any_text_in_a_pem_frame_gives_findings_never_an_exception(body: str, label: str) -> None:
    text = f"-----BEGIN {label}-----\n{body}\n-----END {label}-----\n"
    problems = _check({"ca.crt": text})
    assert problems
    assert all(p.startswith("error: ConfigMap 'certs' key 'ca.crt' line 1: ") for p in problems)


def _next_change(data: dict[str, str], now: datetime = NOW) -> datetime | None:
    policy = load_cluster_policy({"spec": {"driver": {"certConfig": {"name": "certs"}}}})
    facts = ClusterFacts(config_maps=(ConfigMapFacts(name="certs", data=data),))
    return next_certificate_change(policy, facts, now=now)


def test_the_next_change_is_the_first_certificate_boundary_after_now() -> None:
    later = _pem("Later CA", NOW + timedelta(days=2), NOW + timedelta(days=400))
    data = {"a.crt": GOOD, "b.crt": later + GOOD}
    assert _next_change(data) == NOW + timedelta(days=2)  # b's second CA becomes valid
    last_month = NOW + timedelta(days=365 - 30)  # GOOD warns from just after this
    assert _next_change({"a.crt": GOOD}) == last_month + timedelta(microseconds=1)
    assert _next_change({"a.crt": GOOD}, last_month) == last_month + timedelta(microseconds=1)
    expired = _pem("Old CA", NOW - timedelta(days=9), NOW - timedelta(days=1))
    assert _next_change({"a.crt": expired}) is None  # nothing changes any more
    assert _next_change({"a.crt": "not a certificate"}) is None
    assert _next_change({}) is None


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-400, 400), st.integers(1, 800)).map(
            lambda t: (NOW + timedelta(hours=t[0]), NOW + timedelta(hours=t[0] + t[1]))
        ),
        min_size=1,
        max_size=3,
    ),
    st.floats(0.01, 0.99),
)
@example([(NOW, NOW + timedelta(days=30))], 0.5)  # NOW is the warning's boundary
def test_the_verdict_holds_between_changes_and_none_is_missed(
    windows: list[tuple[datetime, datetime]], fraction: float
) -> None:
    """Requeueing at each returned moment misses no change of verdict: between two of them
    the verdict stays what it was (a moment may also change nothing, e.g. a certificate that
    becomes valid while its expiry is already being warned of), and after the last none."""
    pems = "".join(_pem(f"CA {i}", start, end) for i, (start, end) in enumerate(windows))
    data = {"ca.crt": pems}
    moment: datetime | None = NOW
    while moment is not None:
        following = _next_change(data, moment)
        assert following is None or following > moment
        until = following or moment + timedelta(days=3650)
        between = min(moment + (until - moment) * fraction, until - timedelta(microseconds=1))
        assert _check(data, between) == _check(data, moment)
        moment = following  # the walk starts on boundaries (NOW itself may be one)
