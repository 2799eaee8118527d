"""The Python/C++ contract is defined once: the numbers Python passes for the
core's enums (strategies, cuts, removers) and its numeric bounds come from the
extension, and every name Python accepts maps to a code the core knows, each
name to its own code."""

from __future__ import annotations

import numpy as np
import pytest

import gearjax as gx
from gearjax import _checks, _gearjax, checkpoint, strategies, table


def test_enum_codes_come_from_the_extension_one_per_name():
    enums = _gearjax.enums()
    assert set(enums) == {"strategy", "cut", "remover"}
    for codes in enums.values():
        assert len(set(codes.values())) == len(codes)  # no two names share a code
    assert table.CUTS == enums["cut"] and set(table.CUTS) == {"start", "end", "full"}
    assert table.REMOVERS == enums["remover"]
    assert checkpoint.REMOVERS == tuple(enums["remover"])
    assert checkpoint.PLACEMENTS == table.PLACEMENTS == _checks.PLACEMENTS
    assert checkpoint.MAX_STAMP == _gearjax.limits()["max_stamp"] == 1 << 62
    by_class = {gx.Uniform: "uniform", gx.Timestep: "timestep", gx.Prioritized: "prioritized",
                gx.TopK: "topk", gx.Recent: "recent", gx.PrioritizedSteps: "prioritizedsteps"}
    assert {cls.code for cls in by_class} == set(enums["strategy"].values())
    for cls, name in by_class.items():
        assert cls.code == enums["strategy"][name]
    assert strategies.Strategy.code not in enums["strategy"].values()


@pytest.mark.parametrize("remover", sorted(table.REMOVERS))
def test_every_remover_name_reaches_the_core_as_the_remover_it_names(remover):
    # Fill a table of 3 with priorities 2, 1, 3; the 4th insert evicts by the remover.
    t = gx.Table({"x": gx.Column((), "int32")}, capacity=3, max_length=1, remover=remover)
    keys = [t.insert({"x": np.array([i], np.int32)}, priority=p)
            for i, p in enumerate((2.0, 1.0, 3.0))]
    t.insert({"x": np.array([9], np.int32)}, priority=5.0)
    evicted = set(keys) - set(t.contents()["key"].tolist())
    assert evicted == {{"fifo": keys[0], "lifo": keys[2], "min_priority": keys[1]}[remover]}
    t.close()
