"""The write guard's former address: ``retained.guard.Guard`` keeps working; the guard lives in ``retained.safety.guard``."""

from retained.safety.guard import POLICIES, Finding, Guard, GuardResult, find_secrets, looks_random, remove_private

__all__ = ["POLICIES", "Finding", "Guard", "GuardResult", "find_secrets", "looks_random", "remove_private"]
