"""Test support shared by the memwoven packages (not published)."""

from memwoven_test_support.services import (
    SERVICES,
    mysql_url,
    postgres_url,
    redis_url,
    require_services,
    service_url,
    unique_name,
)

__all__ = ["SERVICES", "mysql_url", "postgres_url", "redis_url", "require_services", "service_url", "unique_name"]
