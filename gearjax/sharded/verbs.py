"""The ``verbs`` exchange: one-sided RDMA READs of other processes' shards
through pyverbs (rdma-core's Python binding), over reliable-connected queue
pairs, with no call into the owners. What a sample reads, and why it never
sees a torn window, is the native one-sided sampler (xla_ffi/core/one_sided/one_sided.h,
shared with ``nixl``), which calls this module back to move the bytes of
each round trip (gearjax/sharded/one_sided_native.py PythonTransport).

Reads are posted from Python (one work request per span, chained, signaled,
completions polled with a deadline), so ``verbs`` serves sampling mode (1):
eagerly, or inside a per-process ``jax.jit`` through an
``io_callback`` (``nixl``'s reads need no Python, so its compiled samples are
one FFI call instead).

Set-up, at construction (every process of the job constructs its table):

* the first RDMA device (or ``GEARJAX_VERBS_DEVICE``), port
  ``GEARJAX_VERBS_PORT`` (default 1) and GID index ``GEARJAX_VERBS_GID``
  (default 0): one protection domain, a send and a receive completion queue;
* this shard's memory (arena, slot records, insertion stamps, and each
  strategy's sum tree when first asked for) registered for **remote read
  only**; local staging buffers registered for local write;
* one RC queue pair per peer, published with this process's GID, LID and
  packet sequence numbers under the job token through JAX's key-value store;
  every process then connects each pair (INIT -> RTR -> RTS, GID-addressed:
  ``is_global=1``, so RoCE and InfiniBand alike), after checking the peer's
  token.

Priority updates and tree requests travel as SENDs (the one_sided message
format) into receive buffers the owner keeps posted; the owner's progress
thread checks the token and bounds and applies them. Nothing is written into
another process's memory.

Faults: every read has a deadline (``exchange_timeout``). A failed completion
(the peer died: the RC transport reports it after its retries) or a missed
deadline moves that peer's queue pair to the error state, which flushes its
outstanding reads (so none lands in a buffer later), and raises
``ShardUnavailable`` naming the shard, or with ``on_dead_shard="skip"``
leaves the shard out.

**Unverified on hardware**: no machine this project runs on has an RDMA
device; the tests of this module skip with the reason the device list gives.
"""

from __future__ import annotations

import bisect
import json
import os
import random
import threading
import time
import types
from typing import Any

import numpy as np

from gearjax.errors import ClosedError
from gearjax.sharded import coordination
from gearjax.sharded.one_sided import (OneSidedReader, ShardUnavailable, aligned_zeros,
                                       strategy_key, update_messages)

__all__ = ["ShardUnavailable", "Transport", "verbs_api"]

PROGRESS_SECONDS = 0.0005
SEND_DEPTH = 512          # work requests a queue pair may have outstanding
CHAIN = 32                # reads posted in one post_send
RECVS_PER_PEER = 16       # receive buffers an owner keeps posted for each peer
MESSAGE_BYTES = 1 << 16   # the largest update or tree-request message
# RC transport settings (the values of ibv_rc_pingpong): a dead peer fails a
# read after retry_cnt retries of ~4.096 us * 2**timeout each.
# A SEND to an owner with no receive posted is retried every 0.64 ms
# (_MIN_RNR_TIMER) with no end (_RNR_RETRY 7): an update of more than
# RECVS_PER_PEER messages, or an owner whose progress thread waits a few
# milliseconds for the GIL, must wait for receives posted again, not break
# the pair (6 retries gave up after 3.8 ms, for good). The sender's own
# deadline (the exchange's timeout, _send) bounds the wait; a dead owner
# fails on the transport retries above.
_TIMEOUT, _RETRY_CNT, _RNR_RETRY, _MIN_RNR_TIMER = 14, 7, 7, 12


def verbs_api() -> types.SimpleNamespace:
    """pyverbs, checked: raises ValueError with the exact reason when it is
    missing or this machine has no RDMA device."""
    try:
        import pyverbs.device as device
        import pyverbs.enums as enums
        from pyverbs.addr import GID, AHAttr, GlobalRoute
        from pyverbs.cq import CQ
        from pyverbs.mr import MR
        from pyverbs.pd import PD
        from pyverbs.pyverbs_error import PyverbsRDMAError
        from pyverbs.qp import QP, QPAttr, QPCap, QPInitAttr
        from pyverbs.wr import SGE, RecvWR, SendWR
    except ImportError as e:
        raise ValueError(
            f"exchange='verbs' needs pyverbs built for this system's rdma-core ({e}). On "
            f"Debian or Ubuntu: apt install python3-pyverbs, and make it visible to this "
            f"Python (a virtual environment with --system-site-packages, or a .pth file); "
            f"PyPI's pyverbs must match the system's rdma-core version") from None
    try:
        devices = device.get_device_list()
    except PyverbsRDMAError as e:
        raise ValueError(f"exchange='verbs' found no RDMA device: listing devices failed "
                         f"({e}; error code {e.error_code})") from None
    if not devices:
        raise ValueError("exchange='verbs' found no RDMA device: the device list is empty")
    return types.SimpleNamespace(
        devices=devices, Context=device.Context, e=enums, GID=GID, AHAttr=AHAttr,
        GlobalRoute=GlobalRoute, CQ=CQ, MR=MR, PD=PD, QP=QP, QPAttr=QPAttr, QPCap=QPCap,
        QPInitAttr=QPInitAttr, SGE=SGE, RecvWR=RecvWR, SendWR=SendWR,
        PyverbsRDMAError=PyverbsRDMAError)


# ------------------------------------------------------------ pure pieces
class Regions:
    """Registered memory ranges and their keys: which key covers an address
    (remote: rkey, local: lkey). A span must lie inside one range."""

    def __init__(self):
        self._starts: list[int] = []
        self._ranges: list[tuple[int, int, int]] = []  # (start, end, key), by start

    def add(self, start: int, size: int, key: int) -> None:
        """A range; of ranges with the same start, the newest is found."""
        i = bisect.bisect_right(self._starts, start)
        self._starts.insert(i, start)
        self._ranges.insert(i, (start, start + size, key))

    def key(self, address: int, size: int) -> int:
        i = bisect.bisect_right(self._starts, address) - 1
        if i >= 0:
            start, end, key = self._ranges[i]
            if address + size <= end:
                return key
        raise ValueError(f"{size} bytes at {address:#x} lie in no registered region")


def endpoint_of(raw: bytes | str, token: str, shard: int, me: int) -> dict:
    """A peer's published endpoint, checked: the job token, and the fields
    this process needs to connect to it."""
    info = json.loads(raw.decode() if isinstance(raw, bytes) else raw)
    if not isinstance(info, dict) or info.get("token") != token:
        raise ValueError(f"shard {shard} published an RDMA endpoint under another job token: "
                         f"refused")
    try:
        qp_num, psn = int(info["qps"][str(me)]), int(info["psns"][str(me)])
        gid, lid = str(info["gid"]), int(info["lid"])
        mtu, rd_responder = int(info["mtu"]), int(info["rd_responder"])
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"shard {shard} published a malformed RDMA endpoint ({e})") from None
    if not (0 < qp_num < 1 << 24 and 0 <= psn < 1 << 24 and 0 <= lid < 1 << 16 and
            1 <= mtu <= 5 and 1 <= rd_responder <= 255):
        raise ValueError(f"shard {shard} published an RDMA endpoint out of range")
    return {"qp_num": qp_num, "psn": psn, "gid": gid, "lid": lid, "mtu": mtu,
            "rd_responder": rd_responder}


def message_chunks(token: str, keys: np.ndarray, priorities: np.ndarray,
                   steps: np.ndarray | None = None):
    """Update messages (of steps too, with ``steps``) of at most
    MESSAGE_BYTES each: what a receive buffer holds."""
    for message, _ in update_messages(token, keys, priorities, steps, MESSAGE_BYTES):
        yield message


# ------------------------------------------------------------ the transport
class Transport(OneSidedReader):
    """One process's side of the verbs exchange for one ShardedTable: the
    owner of its shard (registration, receive buffers, applying updates) and
    the reader of every shard."""

    NAME = "verbs"
    UPDATE_MESSAGE_BYTES = MESSAGE_BYTES  # what a receive buffer holds

    def __init__(self, local, shard: int, shards: int, shard_shift: int, path: str, token: str,
                 timeout: float, on_dead_shard: str):
        v = self._v = verbs_api()
        super().__init__()
        self._local = local
        self._shard, self._shards, self._shard_shift = shard, shards, shard_shift
        self._path, self._token, self._timeout = path, token, timeout
        self._on_dead_shard = on_dead_shard
        self._dead: set[int] = set()    # shards sampling leaves out
        self._broken: set[int] = set()  # shards whose queue pair failed: reads refused
        self.refused_updates = self.sent_updates = 0
        # The send queue and CQ, the staging buffers and their regions; taken
        # by readers, senders, the progress thread (reposting) and staging.
        self._lock = threading.RLock()
        name = os.environ.get("GEARJAX_VERBS_DEVICE") or v.devices[0].name.decode()
        self._port = int(os.environ.get("GEARJAX_VERBS_PORT", "1"))
        self._ctx = v.Context(name=name)
        try:
            self._pd = v.PD(self._ctx)
            self._send_cq = v.CQ(self._ctx, 2 * SEND_DEPTH * max(shards - 1, 1), None, None, 0)
            self._recv_cq = v.CQ(self._ctx, RECVS_PER_PEER * max(shards - 1, 1), None, None, 0)
            device = self._ctx.query_device()
            # Reads this side may have in flight (initiator), and serves at
            # once for a peer (responder), within what the device allows; a
            # pair uses the smaller of each side's figures.
            self._rd_initiator = max(1, min(16, device.max_qp_init_rd_atom))
            self._rd_responder = max(1, min(16, device.max_qp_rd_atom))
            self._port_attr = self._ctx.query_port(self._port)
            self._gid_index = _gid_index(self._ctx, self._port, self._port_attr, v.e)
            self._gid = self._ctx.query_gid(self._port, self._gid_index).gid
            self._mrs: list[Any] = []
            self._retired: list[np.ndarray] = []  # grown-out buffers: still registered
            self._base_regions: list[list[int]] = []
            self._local_regions = Regions()
            self._remote_regions: dict[int, Regions] = {}
            self._buffers: dict[str, np.ndarray] = {}
            self._layouts: dict[str, dict] = {}
            self._qps: dict[int, Any] = {}
            self._psns: dict[int, int] = {}
            self._recv: dict[int, tuple[np.ndarray, int]] = {}  # peer -> (buffers, lkey)
            self._epoch = self._sequence = 0
            self._layout(0, 0.0)  # Uniform: arena, records, stamps; published from the start
            self._connect_all()
        except BaseException:
            self._ctx.close()
            raise
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._progress, daemon=True,
                                        name=f"gearjax-verbs-{shard}-progress")
        self._thread.start()

    # ------------------------------------------------------------ the owner
    def _register(self, address: int, size: int, access: int) -> Any:
        mr = self._v.MR(self._pd, size, access, address=address)
        self._mrs.append(mr)
        return mr

    def _layout(self, code: int, alpha: float) -> dict:
        """This shard's layout for a strategy, registered (remote read only)
        and published once, with the rkey of each region."""
        key = strategy_key(code, alpha)
        with self._lock:
            if key in self._layouts:
                return self._layouts[key]
            layout = self._local._native.remote_layout(code, alpha)
            # The arena, records and stamps once (with the first layout), then
            # each strategy's tree; a layout lists every region a reader of
            # it needs, with its rkey.
            names = ([] if self._base_regions else ["arena", "slots", "stamps"]) + \
                (["tree"] if layout["tree_bytes"] else [])
            regions = []
            for region in names:
                address, size = layout[region], layout[f"{region}_bytes"]
                mr = self._register(address, size, self._v.e.IBV_ACCESS_REMOTE_READ)
                regions.append([address, size, mr.rkey])
            if not self._base_regions:
                self._base_regions = [r for r, name in zip(regions, names) if name != "tree"]
            layout["regions"] = self._base_regions + [r for r, name in zip(regions, names)
                                                      if name == "tree"]
            layout["max_length"] = self._local.max_length
            layout["token"] = self._token
            self._layouts[key] = layout
            coordination.client().key_value_set(
                self._layout_path(self._shard, key), json.dumps(layout),
                allow_overwrite=True)
        return layout

    def _connect_all(self) -> None:
        """One RC queue pair per peer, its receive buffers posted (allowed in
        INIT), published; then connected to the peer's pair for this process
        once every peer has published, and a barrier, so that no process
        reads a pair that is not yet ready to answer."""
        v, e = self._v, self._v.e
        peers = [k for k in range(self._shards) if k != self._shard]
        cap = v.QPCap(max_send_wr=SEND_DEPTH, max_recv_wr=RECVS_PER_PEER, max_send_sge=1,
                      max_recv_sge=1)
        init = v.QPInitAttr(qp_type=e.IBV_QPT_RC, scq=self._send_cq, rcq=self._recv_cq, cap=cap)
        for k in peers:
            attr = v.QPAttr(port_num=self._port)
            attr.qp_access_flags = e.IBV_ACCESS_REMOTE_READ  # peers may read, never write
            self._qps[k] = v.QP(self._pd, init, attr)        # created in INIT
            self._psns[k] = random.getrandbits(24)
            buffers = self._staging(f"recv-{k}", RECVS_PER_PEER * MESSAGE_BYTES)
            self._recv[k] = (buffers, self._local_regions.key(buffers.ctypes.data,
                                                              RECVS_PER_PEER * MESSAGE_BYTES))
            for i in range(RECVS_PER_PEER):
                self._post_recv(k, i)
        coordination.client().key_value_set(
            f"{self._path}/verbs/{self._shard}/endpoint", json.dumps({
                "token": self._token, "gid": self._gid, "lid": self._port_attr.lid,
                "mtu": self._port_attr.active_mtu, "rd_responder": self._rd_responder,
                "qps": {str(k): self._qps[k].qp_num for k in peers},
                "psns": {str(k): self._psns[k] for k in peers}}), allow_overwrite=True)
        for k in peers:
            try:
                raw = coordination.client().blocking_key_value_get(
                    f"{self._path}/verbs/{k}/endpoint", int(self._timeout * 1000))
            except Exception as error:  # noqa: BLE001
                raise ShardUnavailable(k, f"no RDMA endpoint published ({error})") from None
            peer = endpoint_of(raw, self._token, k, self._shard)
            attr = v.QPAttr(port_num=self._port)
            attr.qp_access_flags = e.IBV_ACCESS_REMOTE_READ
            attr.path_mtu = min(self._port_attr.active_mtu, peer["mtu"])
            attr.dest_qp_num = peer["qp_num"]
            attr.sq_psn = self._psns[k]
            attr.rq_psn = peer["psn"]  # what the peer sends from
            attr.max_rd_atomic = min(self._rd_initiator, peer["rd_responder"])
            attr.max_dest_rd_atomic = self._rd_responder
            attr.timeout, attr.retry_cnt = _TIMEOUT, _RETRY_CNT
            attr.rnr_retry, attr.min_rnr_timer = _RNR_RETRY, _MIN_RNR_TIMER
            route = v.GlobalRoute(dgid=v.GID(peer["gid"]), sgid_index=self._gid_index,
                                  hop_limit=64)
            attr.ah_attr = v.AHAttr(port_num=self._port, is_global=1, gr=route,
                                    dlid=peer["lid"])
            self._qps[k].to_rts(attr)
        coordination.barrier(self._path, "verbs-connected", self._shards)

    def _post_recv(self, peer: int, index: int) -> None:
        buffers, lkey = self._recv[peer]
        sge = self._v.SGE(buffers.ctypes.data + index * MESSAGE_BYTES, MESSAGE_BYTES, lkey)
        wr = self._v.RecvWR(wr_id=peer << 32 | index, num_sge=1, sg=[sge])
        sge.close()  # copied into the request (pyverbs 44 never frees these itself)
        try:
            self._qps[peer].post_recv(wr)
        finally:
            wr.close()

    def _progress(self) -> None:
        """Serves messages from peers: priority updates and tree requests.
        Every receive buffer is posted again, whatever its message did."""
        while not self._stop.is_set():
            try:
                polled, completions = self._recv_cq.poll(RECVS_PER_PEER)
            except Exception:  # noqa: BLE001 - closing
                return
            for wc in completions[:polled]:
                peer, index = wc.wr_id >> 32, wc.wr_id & 0xFFFFFFFF
                if wc.status != self._v.e.IBV_WC_SUCCESS:
                    self._broken.add(peer)  # its connection failed: buffers flushed
                    continue
                try:
                    start = index * MESSAGE_BYTES
                    self._serve(bytes(self._recv[peer][0][start:start + wc.byte_len]))
                except Exception:  # noqa: BLE001 - a bad message must not stop progress
                    self.refused_updates += 1
                finally:
                    try:
                        self._post_recv(peer, index)
                    except Exception:  # noqa: BLE001 - the pair failed: nothing to receive
                        self._broken.add(peer)
            time.sleep(PROGRESS_SECONDS)

    def close(self) -> None:
        """Stops serving peers and releases every RDMA resource (peers' later
        reads fail, naming this shard). Idempotent. If the progress thread
        does not stop in time the resources are left as they are (polling a
        closed queue would crash the process)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._no_reads() as quiet, self._lock:
            if self._ctx is None or self._thread.is_alive():
                return
            self._ctx.close()  # closes the queue pairs, regions, queues and domain with it
            self._ctx = None
            if quiet:  # else a sample still copies out of them: freed with this transport
                self._buffers.clear()
                self._retired.clear()

    # ------------------------------------------------------------ the reader
    def _check_open(self) -> None:
        if self._ctx is None:
            raise ClosedError("this sharded table is closed")

    def _staging(self, name: str, size: int) -> np.ndarray:
        with self._lock:
            buffer = self._buffers.get(name)
            if buffer is None or buffer.nbytes < size:
                if buffer is not None:  # stays registered (and alive): its key may be in use
                    self._retired.append(buffer)
                buffer = aligned_zeros(max(size, 1 << 16,
                                            0 if buffer is None else 2 * buffer.nbytes))
                mr = self._register(buffer.ctypes.data, buffer.nbytes,
                                    self._v.e.IBV_ACCESS_LOCAL_WRITE)
                self._local_regions.add(buffer.ctypes.data, buffer.nbytes, mr.lkey)
                self._buffers[name] = buffer
            return buffer

    def _ask(self, shard: int, message: bytes) -> None:
        self._send(shard, message)

    def _loaded_layout(self, shard: int, layout: dict) -> None:
        """Checks the layout's token and learns its regions' rkeys."""
        if layout.get("token") != self._token:
            raise ValueError(f"shard {shard} published a layout under another job token: "
                             f"refused")
        with self._lock:
            regions = self._remote_regions.setdefault(shard, Regions())
            for start, size, rkey in layout["regions"]:
                regions.add(int(start), int(size), int(rkey))

    def _fail(self, shard: int) -> None:
        """Moves the shard's queue pair to the error state, so its outstanding
        requests complete (flushed) instead of landing later, and marks it
        broken: later reads of it raise at once."""
        qp = self._qps.get(shard)
        if qp is not None and shard not in self._broken:
            try:
                attr = self._v.QPAttr()
                attr.qp_state = self._v.e.IBV_QPS_ERR
                qp.modify(attr, self._v.e.IBV_QP_STATE)
            except Exception:  # noqa: BLE001 - failing anyway
                pass
        self._broken.add(shard)

    def _wr_id(self, shard: int) -> int:
        """shard << 40 | this call's epoch (8 bits) << 32 | a sequence number."""
        self._sequence = (self._sequence + 1) & 0xFFFFFFFF
        return shard << 40 | self._epoch << 32 | self._sequence

    def _read_remote(self, requests: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        """Reads every span; returns only once every request this call posted
        has completed (read, or flushed by a failed pair), so none lands in a
        buffer after it. Raises ShardUnavailable naming a shard that failed."""
        with self._lock:
            self._check_open()
            self._epoch = (self._epoch + 1) & 0xFF
            spans, outstanding = {}, {}
            for shard, (addresses, sizes, destinations) in requests.items():
                if shard in self._broken:
                    raise ShardUnavailable(shard, "its connection failed earlier")
                spans[shard] = list(zip(addresses.tolist(), sizes.tolist(),
                                        destinations.tolist()))
                outstanding[shard] = 0
            failed: dict[int, str] = {}
            self._read(spans, outstanding, failed)
            if failed:
                shard = min(failed)
                raise ShardUnavailable(shard, failed[shard])

    def _read(self, spans: dict, outstanding: dict, failed: dict) -> None:
        """Posts the spans as chained, signaled RDMA READs and counts this
        epoch's completions until none is outstanding. A failed completion or
        a missed deadline fails that shard's pair (its other requests are
        flushed, and counted too); if even the flushes do not come within a
        second deadline the pair is left broken and the call gives up."""
        deadline = time.monotonic() + self._timeout
        flush_deadline = None
        e = self._v.e
        while True:
            for shard, todo in spans.items():
                if shard in failed:
                    todo.clear()
                    continue
                room = SEND_DEPTH - outstanding[shard]
                while todo and room > 0:
                    chain = todo[:min(CHAIN, room)]
                    del todo[:len(chain)]
                    self._post_reads(shard, chain)
                    outstanding[shard] += len(chain)
                    room -= len(chain)
            if not any(spans.values()) and not any(outstanding.values()):
                return
            polled, completions = self._send_cq.poll(64)
            for wc in completions[:polled]:
                shard, epoch = wc.wr_id >> 40, (wc.wr_id >> 32) & 0xFF
                if epoch != self._epoch or shard not in outstanding:
                    continue  # a request of a call that gave up on a broken pair
                outstanding[shard] -= 1
                if wc.status != e.IBV_WC_SUCCESS and shard not in failed:
                    failed[shard] = f"an RDMA READ failed (completion status {wc.status})"
                    self._fail(shard)
            now = time.monotonic()
            if now > deadline and flush_deadline is None:
                for shard in spans:
                    if (outstanding[shard] or spans[shard]) and shard not in failed:
                        failed[shard] = f"no answer within {self._timeout} s"
                        self._fail(shard)
                flush_deadline = now + self._timeout
            if flush_deadline is not None and now > flush_deadline:
                return  # flushes never came: those pairs stay broken, never used again

    def _post_reads(self, shard: int, chain: list[tuple[int, int, int]]) -> None:
        """One post_send of a chain of READs. pyverbs links a request to the
        next by a raw pointer, so every request stays alive until the post;
        then their memory is freed (pyverbs 44 never frees it itself)."""
        v, e = self._v, self._v.e
        requests, head = [], None
        try:
            for src, n, dst in reversed(chain):
                sge = v.SGE(dst, n, self._local_regions.key(dst, n))
                wr = v.SendWR(wr_id=self._wr_id(shard), opcode=e.IBV_WR_RDMA_READ, num_sge=1,
                              sg=[sge], send_flags=e.IBV_SEND_SIGNALED, next_wr=head)
                sge.close()  # copied into the request
                wr.set_wr_rdma(self._remote_regions[shard].key(src, n), src)
                requests.append(wr)
                head = wr
            self._qps[shard].post_send(head)
        except v.PyverbsRDMAError as error:
            # Nothing of a refused post was queued; the caller counts none.
            self._fail(shard)
            raise ShardUnavailable(shard, f"post_send failed: {error}") from None
        finally:
            for wr in requests:
                wr.close()

    def _send(self, shard: int, message: bytes) -> None:
        """One SEND to the shard's owner, waited for (under the deadline)."""
        v, e = self._v, self._v.e
        if len(message) > MESSAGE_BYTES:
            raise ValueError("message too long")
        with self._lock:
            self._check_open()
            if shard in self._broken:
                raise ShardUnavailable(shard, "its connection failed earlier")
            self._epoch = (self._epoch + 1) & 0xFF
            buffer = self._staging("send", MESSAGE_BYTES)
            buffer[:len(message)] = np.frombuffer(message, np.uint8)
            address = buffer.ctypes.data
            sge = v.SGE(address, len(message), self._local_regions.key(address, len(message)))
            wr_id = self._wr_id(shard)
            wr = v.SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                          send_flags=e.IBV_SEND_SIGNALED)
            sge.close()
            try:
                self._qps[shard].post_send(wr)
            except v.PyverbsRDMAError as error:
                self._fail(shard)
                raise ShardUnavailable(shard, f"post_send failed: {error}") from None
            finally:
                wr.close()
            deadline = time.monotonic() + self._timeout
            while True:
                polled, completions = self._send_cq.poll(1)
                if polled and completions[0].wr_id == wr_id:
                    if completions[0].status != e.IBV_WC_SUCCESS:
                        self._fail(shard)
                        raise ShardUnavailable(shard, f"a SEND failed (completion status "
                                                      f"{completions[0].status})")
                    return
                if not polled and time.monotonic() > deadline:
                    # The send buffer may still be read: fail the pair (flush)
                    # and wait for the flush before it can be reused.
                    self._fail(shard)
                    self._await(wr_id, time.monotonic() + self._timeout)
                    raise ShardUnavailable(shard, f"no answer within {self._timeout} s")

    def _await(self, wr_id: int, deadline: float) -> None:
        while time.monotonic() < deadline:
            polled, completions = self._send_cq.poll(1)
            if polled and completions[0].wr_id == wr_id:
                return

    def send_updates(self, shard: int, keys: np.ndarray, priorities: np.ndarray,
                     steps: np.ndarray | None = None) -> None:
        for message in message_chunks(self._token, keys, priorities, steps):
            self._send(shard, message)
        self.sent_updates += len(keys)


def _gid_index(ctx, port: int, port_attr, e) -> int:
    """GEARJAX_VERBS_GID if set; else on Ethernet (RoCE) the first RoCE v2
    GID that is not zero (routable; index 0 is usually RoCE v1 link-local),
    and on InfiniBand index 0."""
    if "GEARJAX_VERBS_GID" in os.environ:
        return int(os.environ["GEARJAX_VERBS_GID"])
    if port_attr.link_layer != e.IBV_LINK_LAYER_ETHERNET:
        return 0
    for index in range(port_attr.gid_tbl_len):
        try:
            gid = ctx.query_gid(port, index).gid
            if gid.replace("0", "").replace(":", "") and \
                    ctx.query_gid_type(port, index) == e.IBV_GID_TYPE_SYSFS_ROCE_V2:
                return index
        except Exception:  # noqa: BLE001 - an empty slot of the table
            continue
    return 0
