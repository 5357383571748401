"""The delivery wing: workers that claim outbox rows under leases, send them over SMTP and
complete them while they still hold the lease. Knows nothing of HTTP."""
