"""A migration lab built once more when Kafka did not reach a step in time.

Kafka 3.9's migration, run beside the rest of the suite on two busy cores, has stalled in two of the last five fresh-clone
runs: once the controller never copied ZooKeeper's metadata after the brokers rolled into migration mode, once a
broker never rejoined the ISR after the rollback's election. Neither was seen on a run of its own. The lab's own
timeout says where Kafka stopped (the migration driver's last lines, each node's warnings); that reason is kept as
a pytest warning, which the run's summary prints, and the story runs once more from nothing in a new directory.
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
