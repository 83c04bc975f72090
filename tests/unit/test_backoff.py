from __future__ import annotations

import pytest

from interlock._backoff import Backoff


def test_a_backoff_doubles_up_to_its_cap_and_starts_over_after_a_reset() -> None:
    backoff = Backoff(0.1, 0.5)
    assert [backoff.next() for _ in range(5)] == [0.1, 0.2, 0.4, 0.5, 0.5]
    backoff.reset()
    assert backoff.next() == 0.1


def test_an_immediate_backoff_retries_at_once_after_a_success_only() -> None:
    backoff = Backoff(0.2, 5.0, immediate=True)
    assert [backoff.next() for _ in range(3)] == [0.0, 0.2, 0.4]
    backoff.reset()
    assert backoff.next() == 0.0


def test_a_backoff_needs_a_positive_first_delay_within_its_cap() -> None:
    with pytest.raises(ValueError, match="first"):
        Backoff(1.0, 0.5)
