"""Security: authentication, authorization and client quotas (issue 20)."""
