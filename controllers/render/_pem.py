"""CA certificate files (certConfig keys): PEM certificates only, and not about to expire."""

from __future__ import annotations

import re
from datetime import datetime, timedelta

from cryptography import x509

from controllers.render._repofile import Finding

__all__ = ["EXPIRY_WARNING", "certificate_findings", "next_verdict_change"]

# A certificate that expires sooner than this is reported while there is time to replace it.
EXPIRY_WARNING = timedelta(days=30)
_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]+)-----")


def certificate_findings(text: str, now: datetime) -> list[Finding]:
    """What is wrong with a file of PEM certificates at time ``now`` (timezone-aware).

    Every PEM block must be a parseable CERTIFICATE (an error otherwise, a private key
    included); one expired, expiring within `EXPIRY_WARNING` or not yet valid is a warning.
    """
    begins = list(_BEGIN.finditer(text))
    if not begins:
        return [Finding(1, "error", "no PEM certificate (-----BEGIN CERTIFICATE-----) found")]
    findings: list[Finding] = []
    for begin, following in zip(begins, [*begins[1:], None], strict=True):
        line = text.count("\n", 0, begin.start()) + 1
        label, end_marker = begin.group(1), f"-----END {begin.group(1)}-----"
        end = text.find(end_marker, begin.end(), following.start() if following else len(text))
        if end < 0:
            findings.append(Finding(line, "error", f"{begin.group(0)} has no {end_marker}"))
            continue
        if label != "CERTIFICATE":
            findings.append(Finding(line, "error", f"a {label} block, not a CERTIFICATE"))
            continue
        try:
            pem = text[begin.start() : end + len(end_marker)]
            certificate = x509.load_pem_x509_certificate(pem.encode("ascii"))
        except (ValueError, UnicodeEncodeError) as error:
            findings.append(Finding(line, "error", f"not a valid certificate: {error}"))
            continue
        findings.extend(_validity(line, certificate, now))
    return findings


def next_verdict_change(text: str, now: datetime) -> datetime | None:
    """The first moment after ``now`` (to the microsecond) from which `certificate_findings`
    of ``text`` may say something else: a certificate becoming valid, entering its last
    `EXPIRY_WARNING`, or expiring; None when none of its certificates changes any more. Until
    then the findings stay what they are at ``now``, even when ``now`` is itself a boundary."""
    # Valid from notBefore to notAfter inclusive (RFC 5280): the verdict turns at notBefore
    # itself, and a microsecond past the start of the warning and past notAfter.
    tick = timedelta(microseconds=1)
    moments = []
    for pem in _certificates(text):
        after, before = pem.not_valid_after_utc, pem.not_valid_before_utc
        moments += [m for m in (before, after - EXPIRY_WARNING + tick, after + tick) if m > now]
    return min(moments, default=None)


def _certificates(text: str) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(text.encode("ascii"))
    except (ValueError, UnicodeEncodeError):
        return []  # certificate_findings names what is wrong


def _validity(line: int, certificate: x509.Certificate, now: datetime) -> list[Finding]:
    subject = certificate.subject.rfc4514_string() or "(empty subject)"
    after, before = certificate.not_valid_after_utc, certificate.not_valid_before_utc
    if after < now:
        return [Finding(line, "warning", f"certificate {subject!r} expired on {_date(after)}")]
    if after < now + EXPIRY_WARNING:
        message = f"certificate {subject!r} expires on {_date(after)}, within 30 days"
        return [Finding(line, "warning", message)]
    if before > now:
        message = f"certificate {subject!r} is not valid before {_date(before)}"
        return [Finding(line, "warning", message)]
    return []


def _date(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")
