"""The ``verbs`` exchange: one-sided RDMA READs of other processes' shards
through pyverbs (rdma-core's Python binding), over reliable-connected queue
pairs, with no call into the owners. What a sample reads, and why it never
sees a torn window, is gearjax/sharded/one_sided.py (shared with ``nixl``);
this module moves the bytes.

Reads are posted from Python (one work request per span, chained, signaled,
completions polled with a deadline), so ``verbs`` serves sampling mode (1):
eagerly, or inside a per-process ``jax.jit`` through the same ordered
``io_callback`` as ``nixl``.

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
import ctypes
import json
import os
import random
import threading
import time
import types
from typing import Any

import numpy as np

from gearjax.sharded import coordination
from gearjax.sharded.one_sided import (OneSidedReader, ShardUnavailable, apply_updates,
                                       strategy_key, update_message)

__all__ = ["ShardUnavailable", "Transport", "verbs_api"]

PROGRESS_SECONDS = 0.0005
SEND_DEPTH = 512          # work requests a queue pair may have outstanding
CHAIN = 32                # reads posted in one post_send
RECVS_PER_PEER = 16       # receive buffers an owner keeps posted for each peer
MESSAGE_BYTES = 1 << 16   # the largest update or tree-request message
_TREE = b"GXTR"
# RC transport settings (the values of ibv_rc_pingpong): a dead peer fails a
# read after retry_cnt retries of ~4.096 us * 2**timeout each.
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
        i = bisect.bisect_left(self._starts, start)
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
    except (KeyError, TypeError, ValueError) as e:
        raise ValueError(f"shard {shard} published a malformed RDMA endpoint ({e})") from None
    if not (0 < qp_num < 1 << 24 and 0 <= psn < 1 << 24 and 0 <= lid < 1 << 16):
        raise ValueError(f"shard {shard} published an RDMA endpoint out of range")
    return {"qp_num": qp_num, "psn": psn, "gid": gid, "lid": lid}


def message_chunks(token: str, keys: np.ndarray, priorities: np.ndarray):
    """Update messages of at most MESSAGE_BYTES each."""
    per = (MESSAGE_BYTES - 4 - len(token.encode())) // 16
    for start in range(0, len(keys), per):
        yield update_message(token, keys[start:start + per], priorities[start:start + per])


# ------------------------------------------------------------ the transport
class Transport(OneSidedReader):
    """One process's side of the verbs exchange for one ShardedTable: the
    owner of its shard (registration, receive buffers, applying updates) and
    the reader of every shard."""

    def __init__(self, local, shard: int, shards: int, shard_shift: int, path: str, token: str,
                 timeout: float, on_dead_shard: str):
        v = self._v = verbs_api()
        super().__init__()
        self._local = local
        self._shard, self._shards, self._shard_shift = shard, shards, shard_shift
        self._path, self._token, self._timeout = path, token, timeout
        self._on_dead_shard = on_dead_shard
        self._dead: set[int] = set()    # shards sampling leaves out (one_sided.py)
        self._broken: set[int] = set()  # shards whose queue pair failed: reads refused
        self.refused_updates = self.sent_updates = 0
        self._lock = threading.Lock()  # the send queue, the send CQ, the buffers
        name = os.environ.get("GEARJAX_VERBS_DEVICE") or v.devices[0].name.decode()
        self._port = int(os.environ.get("GEARJAX_VERBS_PORT", "1"))
        self._gid_index = int(os.environ.get("GEARJAX_VERBS_GID", "0"))
        self._ctx = v.Context(name=name)
        try:
            self._pd = v.PD(self._ctx)
            self._send_cq = v.CQ(self._ctx, 2 * SEND_DEPTH * max(shards - 1, 1), None, None, 0)
            self._recv_cq = v.CQ(self._ctx, RECVS_PER_PEER * max(shards - 1, 1), None, None, 0)
            device = self._ctx.query_device()
            # Reads this side may have in flight (initiator), and serves at
            # once for a peer (responder), within what the device allows.
            self._rd_initiator = max(1, min(16, device.max_qp_init_rd_atom))
            self._rd_responder = max(1, min(16, device.max_qp_rd_atom))
            self._port_attr = self._ctx.query_port(self._port)
            self._gid = self._ctx.query_gid(self._port, self._gid_index).gid
            self._mrs: list[Any] = []
            self._base_regions: list[list[int]] = []
            self._local_regions = Regions()
            self._remote_regions: dict[int, Regions] = {}
            self._buffers: dict[str, np.ndarray] = {}
            self._layouts: dict[str, dict] = {}
            self._peer_layouts: dict[tuple[int, str], dict] = {}
            self._qps: dict[int, Any] = {}
            self._psns: dict[int, int] = {}
            self._recv: dict[int, np.ndarray] = {}
            self._next_wr = 0
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
                f"{self._path}/verbs/{self._shard}/layout/{key}", json.dumps(layout),
                allow_overwrite=True)
        return layout

    def _connect_all(self) -> None:
        """One RC queue pair per peer, published, then connected to the peer's
        pair for this process once every peer has published."""
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
        coordination.client().key_value_set(
            f"{self._path}/verbs/{self._shard}/endpoint", json.dumps({
                "token": self._token, "gid": self._gid, "lid": self._port_attr.lid,
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
            attr.path_mtu = self._port_attr.active_mtu
            attr.dest_qp_num = peer["qp_num"]
            attr.sq_psn = self._psns[k]
            attr.rq_psn = peer["psn"]  # what the peer sends from
            attr.max_rd_atomic = self._rd_initiator
            attr.max_dest_rd_atomic = self._rd_responder
            attr.timeout, attr.retry_cnt = _TIMEOUT, _RETRY_CNT
            attr.rnr_retry, attr.min_rnr_timer = _RNR_RETRY, _MIN_RNR_TIMER
            route = v.GlobalRoute(dgid=v.GID(peer["gid"]), sgid_index=self._gid_index)
            attr.ah_attr = v.AHAttr(port_num=self._port, is_global=1, gr=route,
                                    dlid=peer["lid"])
            self._qps[k].to_rts(attr)
            self._recv[k] = self._staging(f"recv-{k}", RECVS_PER_PEER * MESSAGE_BYTES)
            for i in range(RECVS_PER_PEER):
                self._post_recv(k, i)

    def _post_recv(self, peer: int, index: int) -> None:
        buffer = self._recv[peer]
        address = buffer.ctypes.data + index * MESSAGE_BYTES
        sge = self._v.SGE(address, MESSAGE_BYTES, self._local_regions.key(address, MESSAGE_BYTES))
        self._qps[peer].post_recv(self._v.RecvWR(wr_id=peer << 32 | index, num_sge=1, sg=[sge]))

    def _progress(self) -> None:
        """Serves messages from peers: priority updates and tree requests."""
        while not self._stop.is_set():
            try:
                polled, completions = self._recv_cq.poll(RECVS_PER_PEER)
                for wc in completions[:polled]:
                    peer, index = wc.wr_id >> 32, wc.wr_id & 0xFFFFFFFF
                    if wc.status == self._v.e.IBV_WC_SUCCESS:
                        start = index * MESSAGE_BYTES
                        self._serve(bytes(self._recv[peer][start:start + wc.byte_len]))
                        self._post_recv(peer, index)
                    else:  # the peer's connection failed: its buffers are flushed
                        self._broken.add(peer)
            except Exception:  # noqa: BLE001 - a bad message must not stop progress
                self.refused_updates += 1
            time.sleep(PROGRESS_SECONDS)

    def _serve(self, message: bytes) -> None:
        token = self._token.encode()
        if len(message) < 4 + len(token) or message[4:4 + len(token)] != token:
            self.refused_updates += 1
            return
        kind, body = message[:4], message[4 + len(token):]
        if kind == _TREE:
            request = json.loads(body)
            code, alpha = int(request["code"]), float(request["alpha"])
            if code in (1, 2) and 0.0 <= alpha <= 8.0:
                self._layout(code, alpha)
            return
        self.refused_updates += apply_updates(self._local, self._shard, self._shard_shift,
                                              kind, body)

    def close(self) -> None:
        """Stops serving peers and releases every RDMA resource (peers' later
        reads fail, naming this shard). Idempotent."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)
        with self._lock:
            if self._ctx is None:
                return
            self._ctx.close()  # closes the queue pairs, regions, queues and domain with it
            self._ctx = None
            self._buffers.clear()

    # ------------------------------------------------------------ the reader
    def _check_open(self) -> None:
        if self._ctx is None:
            raise RuntimeError("this sharded table is closed")

    def _staging(self, name: str, size: int) -> np.ndarray:
        buffer = self._buffers.get(name)
        if buffer is None or buffer.nbytes < size:
            buffer = np.zeros(max(size, 1 << 16, 0 if buffer is None else 2 * buffer.nbytes),
                              np.uint8)
            mr = self._register(buffer.ctypes.data, buffer.nbytes,
                                self._v.e.IBV_ACCESS_LOCAL_WRITE)
            self._local_regions.add(buffer.ctypes.data, buffer.nbytes, mr.lkey)
            self._buffers[name] = buffer  # the old one stays registered: reads may target it
        return buffer

    def _peer_layout(self, shard: int, code: int, alpha: float) -> dict:
        key = strategy_key(code, alpha)
        if (shard, key) in self._peer_layouts:
            return self._peer_layouts[(shard, key)]
        if shard == self._shard:
            layout = self._layout(code, alpha)
        else:
            store = coordination.client()
            path = f"{self._path}/verbs/{shard}/layout/{key}"
            try:
                value = store.key_value_try_get(path)
            except Exception:  # noqa: BLE001 - not published yet: ask the owner for it
                self._send(shard, _TREE + self._token.encode() + json.dumps(
                    {"code": code, "alpha": alpha}).encode())
                try:
                    value = store.blocking_key_value_get(path, int(self._timeout * 1000))
                except Exception as e:  # noqa: BLE001
                    raise ShardUnavailable(shard, f"no answer to a tree request ({e})") from None
            layout = json.loads(value.decode() if isinstance(value, bytes) else value)
            if layout.get("token") != self._token:
                raise ValueError(f"shard {shard} published a layout under another job token: "
                                 f"refused")
            regions = self._remote_regions.setdefault(shard, Regions())
            for start, size, rkey in layout["regions"]:
                regions.add(int(start), int(size), int(rkey))
        self._peer_layouts[(shard, key)] = layout
        return layout

    def _fail(self, shard: int, why: str) -> ShardUnavailable:
        """Moves the shard's queue pair to the error state (its outstanding
        reads are flushed, never completed into our buffers later) and marks
        it broken (later reads of it raise at once); returns the error to
        raise."""
        qp = self._qps.get(shard)
        if qp is not None and shard not in self._broken:
            try:
                attr = self._v.QPAttr()
                attr.qp_state = self._v.e.IBV_QPS_ERR
                qp.modify(attr, self._v.e.IBV_QP_STATE)
            except Exception:  # noqa: BLE001 - failing anyway
                pass
        self._broken.add(shard)
        return ShardUnavailable(shard, why)

    def _wr_id(self, shard: int) -> int:
        self._next_wr = (self._next_wr + 1) & 0xFFFFFFFF
        return shard << 32 | self._next_wr

    def read_into(self, requests: dict[int, tuple[np.ndarray, np.ndarray, np.ndarray]]) -> None:
        with self._lock:
            self._check_open()
            outstanding = {}  # shard -> reads posted and not yet completed
            remote = {}
            for shard, (addresses, sizes, destinations) in requests.items():
                if len(sizes) == 0:
                    continue
                if shard == self._shard:  # this process's own memory: copied here
                    for src, n, dst in zip(addresses.tolist(), sizes.tolist(),
                                           destinations.tolist()):
                        ctypes.memmove(dst, src, n)
                    continue
                if shard in self._broken:
                    raise ShardUnavailable(shard, "its connection failed earlier")
                remote[shard] = list(zip(addresses.tolist(), sizes.tolist(),
                                         destinations.tolist()))
                outstanding[shard] = 0
            deadline = time.monotonic() + self._timeout
            try:
                self._read(remote, outstanding, deadline)
            except BaseException:
                # Reads of other shards still in flight could land in these
                # buffers after we return: wait for them, or flush them.
                self._drain(outstanding, deadline + self._timeout)
                raise

    def _read(self, remote: dict, outstanding: dict, deadline: float) -> None:
        """Posts every span as a chained, signaled RDMA READ and counts their
        completions; stale completions (of a queue pair failed earlier) are
        skipped."""
        v, e = self._v, self._v.e
        while any(remote.values()) or any(outstanding.values()):
            for shard, spans in remote.items():
                room = SEND_DEPTH - outstanding[shard]
                while spans and room > 0:
                    chain = spans[:min(CHAIN, room)]
                    del spans[:len(chain)]
                    head = None
                    for src, n, dst in reversed(chain):
                        sge = v.SGE(dst, n, self._local_regions.key(dst, n))
                        wr = v.SendWR(wr_id=self._wr_id(shard), opcode=e.IBV_WR_RDMA_READ,
                                      num_sge=1, sg=[sge], send_flags=e.IBV_SEND_SIGNALED,
                                      next_wr=head)
                        wr.set_wr_rdma(self._remote_regions[shard].key(src, n), src)
                        head = wr
                    try:
                        self._qps[shard].post_send(head)
                    except v.PyverbsRDMAError as error:
                        raise self._fail(shard, f"post_send failed: {error}") from None
                    outstanding[shard] += len(chain)
                    room -= len(chain)
            polled, completions = self._send_cq.poll(64)
            for wc in completions[:polled]:
                shard = wc.wr_id >> 32
                if shard not in outstanding or shard in self._broken:
                    continue  # a flushed read of a queue pair failed earlier
                outstanding[shard] -= 1
                if wc.status != e.IBV_WC_SUCCESS:
                    raise self._fail(shard, f"an RDMA READ failed (completion status "
                                            f"{wc.status})")
            if polled == 0 and time.monotonic() > deadline:
                late = next(k for k in outstanding if outstanding[k] or remote[k])
                raise self._fail(late, f"no answer within {self._timeout} s")

    def _drain(self, outstanding: dict, deadline: float) -> None:
        """Waits for the reads still in flight on healthy queue pairs; flushes
        (fails) those that do not complete by the deadline."""
        while any(n > 0 for k, n in outstanding.items() if k not in self._broken):
            polled, completions = self._send_cq.poll(64)
            for wc in completions[:polled]:
                shard = wc.wr_id >> 32
                if shard in outstanding and shard not in self._broken:
                    outstanding[shard] -= 1
                    if wc.status != self._v.e.IBV_WC_SUCCESS:
                        self._fail(shard, "failed while draining")
            if polled == 0 and time.monotonic() > deadline:
                for shard, n in outstanding.items():
                    if n > 0:
                        self._fail(shard, "did not complete")
                return

    def _send(self, shard: int, message: bytes) -> None:
        """One SEND to the shard's owner, waited for (under the deadline)."""
        v, e = self._v, self._v.e
        if len(message) > MESSAGE_BYTES:
            raise ValueError("message too long")
        with self._lock:
            self._check_open()
            if shard in self._broken:
                raise ShardUnavailable(shard, "its connection failed earlier")
            buffer = self._staging("send", MESSAGE_BYTES)
            buffer[:len(message)] = np.frombuffer(message, np.uint8)
            address = buffer.ctypes.data
            sge = v.SGE(address, len(message), self._local_regions.key(address, len(message)))
            wr_id = self._wr_id(shard)
            wr = v.SendWR(wr_id=wr_id, opcode=e.IBV_WR_SEND, num_sge=1, sg=[sge],
                          send_flags=e.IBV_SEND_SIGNALED)
            try:
                self._qps[shard].post_send(wr)
            except v.PyverbsRDMAError as error:
                raise self._fail(shard, f"post_send failed: {error}") from None
            deadline = time.monotonic() + self._timeout
            while True:
                polled, completions = self._send_cq.poll(1)
                if polled:
                    wc = completions[0]
                    if wc.wr_id != wr_id:
                        continue  # a flushed read of a queue pair failed earlier
                    if wc.status != e.IBV_WC_SUCCESS:
                        raise self._fail(shard, f"a SEND failed (completion status "
                                                f"{wc.status})")
                    return
                elif time.monotonic() > deadline:
                    raise self._fail(shard, f"no answer within {self._timeout} s")

    def send_updates(self, shard: int, keys: np.ndarray, priorities: np.ndarray) -> None:
        for message in message_chunks(self._token, keys, priorities):
            self._send(shard, message)
        self.sent_updates += len(keys)
