"""Django: request a verification inside `transaction.atomic()`, on Django's own connection.

    from django.db import transaction
    from notifier.contrib.django import request_verification

    with transaction.atomic():
        user = User.objects.create(email=email)
        request_verification(user_id=str(user.pk), email=email, idempotency_key=f"signup-{user.pk}")

The verification and its email exist only if the block commits. Outside an atomic block
(Django's autocommit) it raises NotInTransaction and writes nothing.

A code the person typed into the app is confirmed outside any atomic block (with
ATOMIC_REQUESTS, in a view marked `transaction.non_atomic_requests`), so that a wrong code
stays counted whatever the view does next:

    answer = confirm_code(verification_id, request.POST["code"])
"""

from __future__ import annotations

import uuid

from django.db import connections

from notifier.storage.codes import check_sync_outside_transaction
from notifier.storage.drivers.django_runner import DjangoRunner
from notifier.storage.outbox import request_sync_in_transaction
from notifier.verifications import CodeCheck, Policy, VerificationResult


def request_verification(
    *,
    user_id: str,
    email: str,
    purpose: str | None = None,
    idempotency_key: str | None = None,
    policy: Policy | None = None,
    client_id: str | None = None,
    locale: str | None = None,
    return_to: str | None = None,
    method: str | None = None,
    using: str = "default",
) -> VerificationResult:
    """notifier.request_verification on `connections[using]`, in the atomic block there."""
    return request_sync_in_transaction(
        DjangoRunner(connections[using]),
        user_id=user_id,
        email=email,
        purpose=purpose,
        idempotency_key=idempotency_key,
        policy=policy,
        client_id=client_id,
        locale=locale,
        return_to=return_to,
        method=method,
    )


def confirm_code(
    verification_id: uuid.UUID,
    code: str,
    *,
    policy: Policy | None = None,
    using: str = "default",
) -> CodeCheck:
    """notifier.confirm_code_sync on `connections[using]`, outside any atomic block there
    (else InTransaction, nothing judged)."""
    return check_sync_outside_transaction(
        DjangoRunner(connections[using]), verification_id, code, policy
    )
