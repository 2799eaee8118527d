"""The verbs exchange's pieces that run without an RDMA device: the detection
of pyverbs and of a device (the exact reason a machine cannot run it), the
registered-region lookup every READ's keys come from, the checks on a peer's
published endpoint, and the update messages an owner applies. The transport
itself needs an RDMA device; its multi-process tests (tests/test_sharded.py,
parametrized with "verbs") skip with the reason found here."""

from __future__ import annotations

import errno
import json
import sys
import types

import numpy as np
import pytest

import gearjax as gx
from gearjax.sharded import keys as keys_of
from gearjax.sharded import verbs
from gearjax.sharded.one_sided import apply_updates


def test_this_machine_gets_the_exact_reason_it_cannot_run_verbs():
    try:
        import pyverbs.device as device
    except ImportError as e:
        with pytest.raises(ValueError, match="needs pyverbs") as raised:
            verbs.verbs_api()
        assert str(e) in str(raised.value)
        return
    try:
        found = device.get_device_list()
    except Exception as e:  # noqa: BLE001 - PyverbsRDMAError without a device
        with pytest.raises(ValueError, match="listing devices failed") as raised:
            verbs.verbs_api()
        assert str(e) in str(raised.value)
        return
    if not found:
        with pytest.raises(ValueError, match="device list is empty"):
            verbs.verbs_api()
    else:
        assert verbs.verbs_api().devices


def _fake_pyverbs(monkeypatch, devices):
    """A stand-in pyverbs whose device list fails (ENOSYS) or returns `devices`."""
    class PyverbsRDMAError(Exception):
        def __init__(self, message, code):
            super().__init__(message)
            self.error_code = code

    def get_device_list():
        if devices is None:
            raise PyverbsRDMAError("Failed to get devices list", errno.ENOSYS)
        return devices

    modules = {"pyverbs": types.ModuleType("pyverbs")}
    for name, attributes in {
            "device": {"get_device_list": get_device_list, "Context": object},
            "enums": {}, "addr": {"GID": object, "AHAttr": object, "GlobalRoute": object},
            "cq": {"CQ": object}, "mr": {"MR": object}, "pd": {"PD": object},
            "pyverbs_error": {"PyverbsRDMAError": PyverbsRDMAError},
            "qp": {"QP": object, "QPAttr": object, "QPCap": object, "QPInitAttr": object},
            "wr": {"SGE": object, "RecvWR": object, "SendWR": object}}.items():
        module = types.ModuleType(f"pyverbs.{name}")
        module.__dict__.update(attributes)
        modules[f"pyverbs.{name}"] = module
        setattr(modules["pyverbs"], name, module)
    for name, module in modules.items():
        monkeypatch.setitem(sys.modules, name, module)


def test_a_failing_or_empty_device_list_is_reported_as_such(monkeypatch):
    _fake_pyverbs(monkeypatch, None)
    with pytest.raises(ValueError, match=f"listing devices failed .*error code {errno.ENOSYS}"):
        verbs.verbs_api()
    _fake_pyverbs(monkeypatch, [])
    with pytest.raises(ValueError, match="the device list is empty"):
        verbs.verbs_api()


def test_without_a_device_a_verbs_table_is_refused_before_anything_is_made(monkeypatch):
    _fake_pyverbs(monkeypatch, None)
    with pytest.raises(ValueError, match="found no RDMA device"):
        gx.ShardedTable({"x": gx.Column((), "int32")}, 4, 4, exchange="verbs")


def test_regions_name_the_key_of_every_span_inside_them_and_refuse_the_rest():
    regions = verbs.Regions()
    regions.add(0x2000, 0x100, 7)
    regions.add(0x1000, 0x10, 5)
    assert regions.key(0x1000, 0x10) == 5
    assert regions.key(0x2080, 0x80) == 7
    regions.add(0x1000, 0x20, 6)  # the same start again (a buffer at a reused address)
    assert regions.key(0x1000, 0x10) == 6 and regions.key(0x1008, 0x10) == 6
    for address, size in ((0x1018, 0x10), (0x1fff, 2), (0x0fff, 1), (0x2100, 1)):
        with pytest.raises(ValueError, match="no registered region"):
            regions.key(address, size)


def _endpoint(**change):
    info = {"token": "t", "gid": "fe80:0000:0000:0000:0000:0000:0000:0001", "lid": 3,
            "mtu": 3, "rd_responder": 16, "qps": {"0": 17}, "psns": {"0": 99}}
    info.update(change)
    return json.dumps(info)


def test_a_peer_endpoint_is_checked_before_it_is_used():
    assert verbs.endpoint_of(_endpoint(), "t", 1, 0) == {
        "qp_num": 17, "psn": 99, "gid": "fe80:0000:0000:0000:0000:0000:0000:0001", "lid": 3,
        "mtu": 3, "rd_responder": 16}
    with pytest.raises(ValueError, match="another job token"):
        verbs.endpoint_of(_endpoint(token="u"), "t", 1, 0)
    with pytest.raises(ValueError, match="malformed"):
        verbs.endpoint_of(_endpoint(qps={"2": 17}), "t", 1, 0)  # no queue pair for us
    with pytest.raises(ValueError, match="out of range"):
        verbs.endpoint_of(_endpoint(qps={"0": 1 << 24}), "t", 1, 0)
    with pytest.raises(ValueError, match="out of range"):
        verbs.endpoint_of(_endpoint(mtu=9), "t", 1, 0)
    with pytest.raises(ValueError, match="malformed"):
        verbs.endpoint_of(_endpoint(rd_responder="many"), "t", 1, 0)
    with pytest.raises(ValueError, match="another job token"):
        verbs.endpoint_of("[1, 2]", "t", 1, 0)


def test_update_messages_fit_a_receive_buffer_and_the_owner_applies_only_its_keys():
    table = gx.Table({"x": gx.Column((), "int32")}, capacity=8, max_length=2)
    local = [table.insert({"x": np.zeros(1, np.int32)}) for _ in range(3)]
    shift = 62  # two shards; this table is shard 1
    mine = keys_of.global_keys(1, np.array(local), shift)
    keys = np.concatenate([mine, keys_of.global_keys(0, np.array(local), shift)])
    priorities = np.arange(1.0, 7.0)
    messages = list(verbs.message_chunks("tok", keys, priorities))
    assert len(messages) == 1 and len(messages[0]) <= verbs.MESSAGE_BYTES
    body = messages[0][4 + 3:]
    assert apply_updates(table, 1, shift, messages[0][:4], body) == 3  # shard 0's refused
    np.testing.assert_array_equal(table.contents()["priority"], [1.0, 2.0, 3.0])
    assert apply_updates(table, 1, shift, b"JUNK", body) == 1
    assert apply_updates(table, 1, shift, messages[0][:4], body[:-1]) == 1  # torn
    big = np.zeros(10_000, np.int64)
    chunks = list(verbs.message_chunks("tok", big, np.ones(10_000)))
    assert all(len(c) <= verbs.MESSAGE_BYTES for c in chunks)
    assert sum((len(c) - 7) // 16 for c in chunks) == 10_000


def test_step_update_messages_fit_a_receive_buffer_and_the_owner_applies_its_rows():
    table = gx.Table({"x": gx.Column((), "int32")}, capacity=8, max_length=4,
                     step_priorities=True)
    local = [table.insert({"x": np.zeros(3, np.int32)}, priority=1.0) for _ in range(2)]
    shift = 62  # two shards; this table is shard 1
    keys = np.concatenate([keys_of.global_keys(1, np.array(local), shift),
                           keys_of.global_keys(0, np.array(local[:1]), shift)])
    steps = np.array([[0, 2], [1, -1], [0, 1]])
    priorities = np.array([[5.0, 6.0], [7.0, np.nan], [8.0, 9.0]])
    messages = list(verbs.message_chunks("tok", keys, priorities, steps))
    assert len(messages) == 1 and len(messages[0]) <= verbs.MESSAGE_BYTES
    kind, body = messages[0][:4], messages[0][4 + 3:]
    assert apply_updates(table, 1, shift, kind, body) == 1  # shard 0's row refused
    np.testing.assert_array_equal(table.contents()["step_priorities"],
                                  [5.0, 1.0, 6.0, 1.0, 7.0, 1.0])
    assert apply_updates(table, 1, shift, kind, body[:-1]) == 1  # torn
    past = list(verbs.message_chunks("tok", keys[:1], np.ones((1, 1)), np.array([[3]])))[0]
    assert apply_updates(table, 1, shift, past[:4], past[7:]) == 1  # step 3 of 3: refused
    np.testing.assert_array_equal(table.contents()["step_priorities"],
                                  [5.0, 1.0, 6.0, 1.0, 7.0, 1.0])
    wide = 10_000  # steps a row: 160 KB, more than a receive buffer holds
    with pytest.raises(ValueError, match="does not fit one update message"):
        list(verbs.message_chunks("tok", keys[:1], np.ones((1, wide)),
                                  np.zeros((1, wide), np.int64)))
    none = list(verbs.message_chunks("tok", keys[:1], np.ones((1, 0)), np.zeros((1, 0), int)))
    assert apply_updates(table, 1, shift, none[0][:4], none[0][7:]) == 0  # W = 0: names nothing
    many = list(verbs.message_chunks("tok", np.zeros(3000, np.int64), np.ones((3000, 4)),
                                     np.zeros((3000, 4), np.int64)))
    assert len(many) > 1 and all(len(m) <= verbs.MESSAGE_BYTES for m in many)


def test_a_step_update_no_message_holds_is_refused_before_this_shard_applies_its_part():
    """A ShardedTable update over a one-sided exchange applies this shard's
    rows itself and sends the others' as messages: with rows for another
    shard too wide for any message, it is refused before either (this
    shard's rows were applied, then sending raised). Rows for this shard
    alone send nothing, so no width limits them."""
    from gearjax.sharded.table import ShardedTable
    table = gx.Table({"x": gx.Column((), "int32")}, capacity=8, max_length=16_384,
                     step_priorities=True)
    key = table.insert({"x": np.zeros(8_192, np.int32)}, priority=1.0)
    transport = types.SimpleNamespace(_token="t" * 32, UPDATE_MESSAGE_BYTES=verbs.MESSAGE_BYTES,
                                      send_updates=lambda *a: pytest.fail("sent"))
    transport.check_updates = lambda width: verbs.Transport.check_updates(transport, width)
    shift = 62  # two shards; this table is shard 1
    owner = types.SimpleNamespace(_transport=transport, _shard_shift=shift, _shard=1,
                                  _processes=2, _local=table, _publish=lambda: None)
    wide = 4_093  # steps a row: one more than a verbs message holds with a job token
    keys = np.concatenate([keys_of.global_keys(1, np.array([key]), shift),
                           keys_of.global_keys(0, np.array([key]), shift)])
    with pytest.raises(ValueError, match="does not fit one update message"):
        ShardedTable._update_one_sided(owner, keys, np.full((2, wide), 3.0),
                                       np.tile(np.arange(wide), (2, 1)))
    np.testing.assert_array_equal(table.contents()["step_priorities"], np.ones(8_192))
    mine = ShardedTable._update_one_sided(owner, keys[:1], np.full((1, wide), 3.0),
                                          np.arange(wide)[None])
    assert mine == 1 and (table.contents()["step_priorities"][:wide] == 3.0).all()
