"""A migration lab built once more when Kafka did not reach a step in time.

Kafka 3.9's migration, run beside the rest of the suite on two busy cores, sometimes stalls: the controller
never copies ZooKeeper's metadata after the brokers rolled into migration mode, or a broker never rejoins the ISR
after the rollback's election. A lab run alone has not shown it. The lab's own timeout says where Kafka stopped
(the migration driver's last lines, each node's warnings); that reason is kept as a pytest warning, which the
run's summary prints, and the story runs once more from nothing in a new directory.
A second timeout fails the tests; any other error fails them at once.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TypeVar

from services.errors import UserError

T = TypeVar("T")

TIMED_OUT = "timed out"
"""How every wait of the labs (`kafkalab`) begins its error: the only failure worth a second run."""


class LabRetried(UserWarning):
    """A lab's story timed out waiting on Kafka once and ran again."""


def twice_on_timeout(story: Callable[[], T], what: str) -> T:
    """`story()`, and once more if it raised a lab timeout, with the first timeout's reason as a `LabRetried`."""
    try:
        return story()
    except UserError as first:
        if not str(first).startswith(TIMED_OUT):
            raise
        warnings.warn(LabRetried(f"{what}: the first attempt {first}; ran it once more"), stacklevel=2)
    return story()
