"""Pieces of the one-sided exchanges that need no second process: the slot
record's layout (from the core), int64 keys handed to JAX without x64, and
the transports' progress, peer loads and close through fakes.
The sampler's tree descent is the owner's own SumTreeChild
(xla_ffi/core/selectors/sum_tree_test.cc, one_sided_test.cc)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from gearjax import _ffi


def test_int64_values_reach_jax_whole_without_x64():
    values = np.array([0, 1, (1 << 62) | 12345, (1 << 63) - 1, -1], np.int64)
    out = _ffi.int64_array(values)
    assert out.dtype == np.int64
    assert np.asarray(out).tolist() == values.tolist()
    assert not jax.config.jax_enable_x64


def test_the_slot_record_layout_comes_from_the_core():
    from gearjax._gearjax import slot_layout
    from gearjax.sharded.one_sided_protocol import _RECORD, _SLOT_BYTES
    layout = slot_layout()
    assert _RECORD.itemsize == _SLOT_BYTES == layout["slot_bytes"]
    assert [_RECORD.fields[name][1] for name in ("key", "length", "priority", "pins", "state")] \
        == [layout[f"{name}_offset"] for name in ("key", "length", "priority", "pins", "state")]


def test_a_bad_message_drops_only_itself_not_the_rest_of_its_batch():
    """NIXL hands the progress thread a batch of notifications once. Fails
    when one try wraps the batch: the bad message dropped the others after
    it (another peer's priority updates), and counted one refusal for all."""
    import threading

    from gearjax.sharded.nixl import Transport

    served = []

    class Agent:
        batches = [[("a", b"first"), ("b", b"bad"), ("c", b"third")], []]

        def notifications(self):
            if len(self.batches) == 1:
                transport._stop.set()
            return self.batches.pop(0)

    def serve(message):
        if message == b"bad":
            raise ValueError("a tree request for a ninth alpha")
        served.append(message)

    transport = Transport.__new__(Transport)  # only what _progress uses
    transport._stop, transport._agent = threading.Event(), Agent()
    transport._serve, transport.refused_updates = serve, 0
    transport._progress()
    assert served == [b"first", b"third"] and transport.refused_updates == 1


def test_a_peers_newer_metadata_is_loaded_over_the_old_never_after_forgetting_it(monkeypatch):
    """Transport._peer, as a peer's layouts need newer metadata: it loads the
    newest published metadata over what it loaded (forgetting the peer first
    failed the reads other threads and compiled plans posted meanwhile:
    tests/test_nixl_native.py), once however many threads ask at once, and
    never goes back to an older version."""
    import base64
    import json
    import threading
    import time

    from gearjax.sharded import nixl

    published = {"version": 1}
    calls = []

    class Store:
        def blocking_key_value_get(self, key, timeout_ms):
            assert key == "t/nixl/1/agent"
            return json.dumps({"token": "tok", "name": "owner", "version": published["version"],
                               "metadata": base64.b64encode(b"md%d" % published["version"])
                               .decode()})

    class Agent:
        def load_peer(self, metadata):
            calls.append(("load", metadata))
            time.sleep(0.01)  # other threads ask meanwhile
            return "owner"

        def forget_peer(self, name):
            calls.append(("forget", name))

    monkeypatch.setattr(nixl.coordination, "client", lambda: Store())
    transport = nixl.Transport.__new__(nixl.Transport)  # only what _peer uses
    transport._agent, transport._path, transport._token, transport._timeout = \
        Agent(), "t", "tok", 5.0
    transport._peers, transport._peer_versions = {}, {}
    transport._peer_lock = threading.Lock()

    assert transport._peer(1) == "owner"
    published["version"] = 3  # the owner registered two regions since
    threads = [threading.Thread(target=transport._peer, args=(1, 3)) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert calls == [("load", b"md1"), ("load", b"md3")]
    assert transport._peer(1, 2) == "owner" and len(calls) == 2  # 3 loaded: nothing to do
    assert transport._peer_versions[1] == 3


def closing_transport(module, timeout: float = 0.05):
    """A one-sided transport of `module` (nixl or verbs) with only what
    close() uses, its resource a fake that records being closed, and a
    staging buffer and a retired one. Returns (transport, closed list)."""
    import threading

    transport = module.Transport.__new__(module.Transport)
    transport._stop, transport._thread = threading.Event(), threading.Thread(target=lambda: None)
    transport._thread.start()
    transport._thread.join()
    transport._plans, transport._dead = {}, set()
    transport._reading, transport._lock, transport._timeout = \
        threading.Lock(), threading.Lock(), timeout
    closed = []

    class Resource:
        def close(self):
            closed.append(True)

    transport._agent = transport._ctx = Resource()
    transport._buffers, transport._retired = {"rows": np.zeros(16)}, [np.zeros(4)]
    return transport, closed


@pytest.mark.parametrize("exchange, resource", [("nixl", "_agent"), ("verbs", "_ctx")])
def test_a_close_while_a_sample_still_reads_keeps_its_staging_buffers(exchange, resource):
    """A close waits for a sample in progress for the exchange's timeout, then
    closes anyway: the staging buffers that sample's native sampler still
    copies out of must not be freed then (they were: use after free), only
    with the transport, which the sample holds. Without a sample in
    progress, close frees them. Both one-sided exchanges (verbs needs no
    RDMA device for this: its resources are fakes)."""
    import importlib

    module = importlib.import_module(f"gearjax.sharded.{exchange}")
    transport, closed = closing_transport(module)
    rows = transport._buffers["rows"]
    transport._reading.acquire()  # a sample reading past the timeout
    transport.close()
    assert closed == [True] and getattr(transport, resource) is None
    assert transport._buffers["rows"] is rows and len(transport._retired) == 1
    transport._reading.release()

    transport, closed = closing_transport(module)
    transport.close()
    assert closed == [True] and transport._buffers == {} and transport._retired == []


def test_a_sample_holds_its_own_shard_so_closing_it_keeps_the_memory_it_copies(monkeypatch):
    """A one-sided sample copies this process's shard by address, and
    ShardedTable.close closes that shard right after the transport, whose
    close gives up on a sample after the exchange's timeout (verbs). The
    sample holds the shard meanwhile, so its close waits, then warns and
    keeps the memory; it goes with a close once the sample has left. A sample
    after the close fails, saying the shard is closed, and holds nothing.
    Fails with the sample not holding the shard: the memory went at once; and
    with a second ShardedTable.close doing nothing: the memory stayed."""
    import threading
    import warnings

    import gearjax as gx
    import gearjax.table as table_module
    from gearjax.errors import ClosedError
    from gearjax.sharded.one_sided import OneSidedReader
    from gearjax.sharded.table import ShardedTable

    started, finish = threading.Event(), threading.Event()
    reserved_during = []

    class Reader(OneSidedReader):
        def _check_open(self):
            pass

        def _sample_native(self, seed, args, shards):
            started.set()
            finish.wait(10)  # copying the shard's spans meanwhile
            reserved_during.append(self._local.stats()["bytes_reserved"])
            return {"rows": len(shards)}

    local = gx.Table({"x": gx.Column((), "int32")}, capacity=2, max_length=4)
    local.insert({"x": np.arange(3, dtype=np.int32)})
    reader = Reader()
    reader._local, reader._shard, reader._shards, reader._dead = local, 0, 1, set()
    result = []
    sampling = threading.Thread(target=lambda: result.append(reader.sample((1, 2), None)))
    sampling.start()
    assert started.wait(10)
    monkeypatch.setattr(table_module, "CLOSE_WAIT_SECONDS", 0.1)
    with pytest.warns(RuntimeWarning, match="still inside the table"):
        local.close()
    assert local.closed and local.stats()["bytes_reserved"] > 0
    finish.set()
    sampling.join(10)
    assert result == [{"rows": 1}] and reserved_during[0] > 0
    # The sharded table reads as closed now; closing it again frees the memory
    # once the sample has left (as Table.close does), without a warning.
    sharded = ShardedTable.__new__(ShardedTable)
    sharded._local, sharded._transport = local, None
    assert sharded.closed
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        sharded.close()
    assert local.stats()["bytes_reserved"] == 0
    with pytest.raises(ClosedError, match="closed"):
        reader.sample((1, 2), None)
    assert not reader._reading.locked()
    # A read of this process's shard by address holds it too: refused once closed.
    source, target = np.arange(4, dtype=np.uint8), np.zeros(4, np.uint8)
    span = (np.array([source.ctypes.data], np.uint64), np.array([4], np.int64),
            np.array([target.ctypes.data], np.uint64))
    with pytest.raises(ClosedError, match="closed"):
        reader.read_into({0: span})
    assert not target.any()
