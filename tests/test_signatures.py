"""Methods with two call forms show real parameters to help(), inspect and
editors (gearjax/_signatures.py), not (*args, **kwargs)."""

from __future__ import annotations

import inspect
import pydoc
import typing

import pytest

import gearjax as gx

FORMS = {
    # method -> the parameters its signature shows (the state form, first)
    gx.Table.sample: ["self", "state", "rng_key", "batch_size", "window", "strategy", "pad",
                      "cut", "replace", "numpy"],
    gx.Table.update_priorities: ["self", "state", "keys", "priorities", "steps"],
    gx.Table.insert_batch: ["self", "state", "columns", "lengths", "priorities"],
    gx.ShardedTable.sample: ["self", "state", "rng_key", "batch_size", "window", "strategy",
                             "pad", "cut", "replace", "axis_name", "prefetch"],
    gx.ShardedTable.update_priorities: ["self", "state", "keys", "priorities", "axis_name",
                                        "steps"],
    gx.ShardedTable.insert_batch: ["self", "state", "columns", "lengths", "priorities"],
}


@pytest.mark.parametrize("method", FORMS, ids=lambda m: m.__qualname__)
def test_two_form_methods_show_their_parameters(method):
    assert list(inspect.signature(method).parameters) == FORMS[method]
    assert "*args" not in pydoc.render_doc(method)
    assert len(typing.get_overloads(method)) == 2  # what type checkers and editors read


def test_a_method_without_overloads_is_refused():
    from gearjax._signatures import first_overload

    def plain(*args):
        return args

    with pytest.raises(TypeError, match="has no overloads"):
        first_overload(plain)

