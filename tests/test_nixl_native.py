"""gearjax._gearjax.NixlAgent, the nixl exchange's native agent (NIXL's C API,
xla_ffi/core/nixl/nixl_agent.h), in one process: two agents, one owning a shard,
one reading it. The multi-process exchange over it is tests/test_sharded.py."""

from __future__ import annotations

import threading
import time
import uuid

import numpy as np
import pytest

from conftest import nixl_missing

pytestmark = pytest.mark.skipif(nixl_missing() is not None, reason=str(nixl_missing()))


@pytest.fixture
def pair():
    """(owner, reader, the reader's name for the owner, shard bytes, into
    bytes), with a thread keeping the owner progressing."""
    from gearjax.sharded import nixl
    new_agent = nixl.nixl_api()
    tag = uuid.uuid4().hex[:8]
    owner, reader = new_agent(f"owner-{tag}"), new_agent(f"reader-{tag}")
    shard = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8)
    into = np.zeros(1 << 20, np.uint8)
    owner.register(shard.ctypes.data, shard.nbytes)
    reader.register(into.ctypes.data, into.nbytes)
    peer = reader.load_peer(owner.metadata())
    stop = threading.Event()
    messages: list[tuple[str, bytes]] = []

    def progress():
        while not stop.is_set():
            try:
                messages.extend(owner.notifications())
            except RuntimeError:  # closed by a test
                return
            stop.wait(0.0005)

    thread = threading.Thread(target=progress, daemon=True)
    thread.start()
    yield owner, reader, peer, shard, into, messages
    stop.set()
    thread.join(5)
    reader.close()
    owner.close()


def spans(shard, into, n, size, seed):
    """n random spans of `size` bytes: (remote, local, sizes) as uint64."""
    rng = np.random.default_rng(seed)
    remote = shard.ctypes.data + rng.integers(0, shard.nbytes - size, n).astype(np.uint64)
    local = into.ctypes.data + np.arange(n, dtype=np.uint64) * np.uint64(size)
    return remote.astype(np.uint64), local, np.full(n, size, np.uint64)


def test_a_batched_read_copies_every_span_exactly(pair):
    owner, reader, peer, shard, into, _ = pair
    for n, size in ((1, 64), (256, 1360), (1024, 512)):
        remote, local, sizes = spans(shard, into, n, size, n)
        assert reader.read([(peer, remote, local, sizes)], 10.0) == (-1, "")
        offsets = (remote - np.uint64(shard.ctypes.data)).astype(np.int64)
        for i in range(n):
            assert np.array_equal(into[i * size:(i + 1) * size],
                                  shard[offsets[i]:offsets[i] + size]), (n, size, i)


def test_several_requests_to_one_peer_run_in_one_call(pair):
    owner, reader, peer, shard, into, _ = pair
    a = spans(shard, into, 8, 100, 1)
    b = tuple(x.copy() for x in spans(shard, into, 8, 100, 2))
    b[1][:] += np.uint64(8 * 100)  # land after a's spans
    assert reader.read([(peer, *a), (peer, *b)], 10.0) == (-1, "")
    offset = int(b[0][3]) - shard.ctypes.data
    assert np.array_equal(into[1100:1200], shard[offset:offset + 100])


def test_a_kept_read_posts_its_transfer_again_and_reads_fresh_bytes(pair):
    owner, reader, peer, shard, into, _ = pair
    remote, local, sizes = spans(shard, into, 8, 512, 11)
    offsets = (remote - np.uint64(shard.ctypes.data)).astype(np.int64)
    before = reader.transfers()
    for fill in range(1, 5):
        shard[offsets[0]:offsets[0] + 512] = fill  # the owner rewrites a span
        assert reader.read([(peer, remote, local, sizes)], 10.0, keep=True) == (-1, "")
        assert (into[:512] == fill).all()  # this read's bytes, not the first one's
    after = reader.transfers()
    assert after["made"] - before["made"] == 1 and after["reposted"] - before["reposted"] == 3
    # Other spans make another kept transfer; forgetting the peer drops both.
    remote2, local2, sizes2 = spans(shard, into, 4, 256, 12)
    assert reader.read([(peer, remote2, local2, sizes2)], 10.0, keep=True) == (-1, "")
    assert reader.transfers()["made"] == after["made"] + 1
    reader.forget_peer(peer)
    assert reader.load_peer(owner.metadata()) == peer
    assert reader.read([(peer, remote2, local2, sizes2)], 10.0, keep=True) == (-1, "")
    assert reader.transfers() == {"made": after["made"] + 2, "reposted": after["reposted"]}


def test_notifications_arrive_in_order_from_the_named_sender(pair):
    owner, reader, peer, shard, into, messages = pair
    me = owner.load_peer(reader.metadata())
    for i in range(3):
        reader.notify(peer, b"GXUP" + bytes([i]) + b"\x00tail")
    for _ in range(4000):  # the sender progresses too (the exchange's progress thread does)
        if len(messages) >= 3:
            break
        assert reader.notifications() == []
        threading.Event().wait(0.001)
    assert messages == [(me, b"GXUP" + bytes([i]) + b"\x00tail") for i in range(3)]


def test_bad_requests_are_refused_before_nixl_sees_them(pair):
    owner, reader, peer, shard, into, _ = pair
    remote, local, sizes = spans(shard, into, 4, 64, 3)
    with pytest.raises(ValueError, match="one entry per span"):
        reader.read([(peer, remote, local[:3], sizes)], 1.0)
    for timeout in (0.0, -1.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="timeout"):
            reader.read([(peer, remote, local, sizes)], timeout)
    with pytest.raises(TypeError):
        reader.read([(peer, remote, local)], 1.0)
    with pytest.raises(TypeError):
        reader.read([(peer, remote.reshape(2, 2), local, sizes)], 1.0)
    with pytest.raises(ValueError):
        reader.register(0, 64)
    with pytest.raises(ValueError):
        reader.load_peer(b"")
    with pytest.raises(RuntimeError):
        reader.load_peer(b"\x00not metadata\xff" * 4)
    # Nothing above broke the agent.
    assert reader.read([(peer, remote, local, sizes)], 10.0) == (-1, "")


def test_memory_the_owner_did_not_register_is_never_read(pair):
    owner, reader, peer, shard, into, _ = pair
    outside = np.array([shard.ctypes.data + shard.nbytes], np.uint64)
    failed, why = reader.read([(peer, outside, np.array([into.ctypes.data], np.uint64),
                                np.array([64], np.uint64))], 2.0)
    assert failed == 0 and "failed" in why
    straddling = np.array([shard.ctypes.data + shard.nbytes - 32], np.uint64)
    failed, _ = reader.read([(peer, straddling, np.array([into.ctypes.data], np.uint64),
                              np.array([64], np.uint64))], 2.0)
    assert failed == 0


def test_a_read_from_a_peer_it_cannot_reach_fails_naming_that_request(pair):
    # A dead owner in another process is tests/test_sharded.py's kill test; in
    # one process the owner's memory stays mapped, so a forgotten peer stands in.
    owner, reader, peer, shard, into, _ = pair
    remote, local, sizes = spans(shard, into, 16, 256, 4)
    assert reader.read([(peer, remote, local, sizes)], 10.0) == (-1, "")
    reader.forget_peer(peer)
    failed, why = reader.read([(peer, remote[:0], local[:0], sizes[:0]),
                               (peer, remote, local, sizes)], 3.0)
    assert failed == 1 and "failed" in why
    # A kept read fails alike, and is not kept.
    reposted = reader.transfers()["reposted"]
    for _ in range(2):
        assert reader.read([(peer, remote, local, sizes)], 3.0, keep=True)[0] == 0
    assert reader.transfers()["reposted"] == reposted
    assert reader.load_peer(owner.metadata()) == peer  # and it can be loaded again
    assert reader.read([(peer, remote, local, sizes)], 10.0) == (-1, "")


def test_a_closed_agent_refuses_every_call(pair):
    owner, reader, peer, shard, into, _ = pair
    owner.close()
    owner.close()  # idempotent
    for call in (owner.metadata, owner.notifications, lambda: owner.register(into.ctypes.data, 8),
                 lambda: owner.notify(peer, b"x"),
                 lambda: owner.read([(peer, *spans(shard, into, 1, 8, 5))], 1.0)):
        with pytest.raises(RuntimeError, match="closed"):
            call()


def test_a_compiled_plan_refuses_more_columns_than_the_agent_stages(pair):
    from gearjax._gearjax import one_sided_plan, one_sided_plan_close
    owner, reader, peer, shard, into, _ = pair
    layout = (peer, 0, [0] * 6, 0, 1, 0, [0], 8, 0, 4, 0)
    with pytest.raises(ValueError, match="at most 5 columns"):
        one_sided_plan(reader, [layout], [0], 62, [(4, b"\0" * 4)] * 6, 0, 0, 8, 4, False, 1.0,
                       False)
    # Without an agent (shards copied in this process) reads need no staging.
    one_sided_plan_close(one_sided_plan(None, [layout], [0], 62, [(4, b"\0" * 4)] * 6, 0, 0, 8,
                                        4, False, 1.0, False))


def reload_while_reading(pair, forget_first: bool, reloads: int = 12):
    """Reads from a thread without pause while the owner registers a new
    region `reloads` times and the reader loads its metadata again (as the
    nixl exchange does when a peer's layout needs a newer version); returns
    (the reads that failed, the reads made, whether each new region read
    back whole)."""
    owner, reader, peer, shard, into, _ = pair
    remote, local, sizes = spans(shard, into, 8, 512, 21)
    stop, failures, reads = threading.Event(), [], [0]

    def keep_reading():
        while not stop.is_set():
            result = reader.read([(peer, remote, local, sizes)], 10.0)
            reads[0] += 1
            if result != (-1, ""):
                failures.append(result)

    thread = threading.Thread(target=keep_reading)
    thread.start()
    regions, whole = [], []
    try:
        for i in range(reloads):
            region = np.full(4096, i + 1, np.uint8)
            regions.append(region)  # registered until the owner closes
            owner.register(region.ctypes.data, region.nbytes)
            if forget_first:
                reader.forget_peer(peer)
            assert reader.load_peer(owner.metadata()) == peer
            landing = np.zeros(4096, np.uint8)
            reader.register(landing.ctypes.data, landing.nbytes)
            regions.append(landing)
            result = reader.read([(peer, np.array([region.ctypes.data], np.uint64),
                                   np.array([landing.ctypes.data], np.uint64),
                                   np.array([4096], np.uint64))], 10.0)
            whole.append(result == (-1, "") and (landing == i + 1).all())
            after = reads[0] + 3  # the reader reads between reloads too
            while reads[0] < after and thread.is_alive():
                time.sleep(0.0005)
    finally:
        stop.set()
        thread.join(30)
    return failures, reads[0], all(whole)


def test_a_peers_newer_metadata_loads_over_the_old_and_reads_meanwhile_never_fail(pair):
    """What the nixl exchange's Transport._peer relies on: loading a known
    peer's newer metadata (regions it registered since) without forgetting
    the peer adds the regions, and reads other threads post meanwhile all
    succeed. Forgetting first (what _peer did) fails such reads: checked
    below, so that this test shows the difference on this NIXL."""
    failures, reads, whole = reload_while_reading(pair, forget_first=False)
    assert whole, "a region registered after the first load could not be read after a reload"
    assert reads >= 36 and failures == [], failures[:3]


def test_forgetting_a_peer_to_reload_it_fails_the_reads_made_meanwhile(pair):
    # The counterpart of the test above: the window between forget and load
    # is real (a reader thread's reads fail in it), which is why _peer does
    # not forget. Several rounds, as a round may miss the window.
    failed = 0
    for _ in range(5):
        failures, _, _ = reload_while_reading(pair, forget_first=True)
        failed += len(failures)
        if failed:
            break
    assert failed > 0
