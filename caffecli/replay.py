"""A net's forward-backward captured once as a CUDA graph and replayed (on by default on a GPU;
``CAFFECLI_CUDA_GRAPHS=0`` turns it off).

On small nets the GPU waits on Python: each layer costs tens of microseconds of interpreter
time for microseconds of kernels. With graphs on, Net.forward_backward runs the leading data
layers as usual (they fill host memory), then launches one graph holding every other layer's
forward and backward, captured once the blobs' shapes and device memory have held still for
a pass (the third, in practice: the first passes compile kernels and allocate buffers) and
replayed while they keep holding still. A solver captures its whole iteration the same way
(solvers/graphed.py).

What a graph cannot see is handled around the launch: memory the graph reads that the host
wrote since (the next batch, weights set from Python) is copied to the device first; layers that
read a host value each pass refill a device scalar (``Layer.capture_feeds``: Dropout's key from
the rank's stream, so replays draw what eager passes draw); the memory the graph wrote is marked
current on the device; the loss terms come back in one copy. A net whose layers cannot be
captured (a host-side layer after the data, a layer that reads device values on the host, a
debug hook) runs eagerly, saying why in one INFO line.
"""
from . import backend, context, glog, syncedmem
from .util import environ

WARMUP_PASSES = 1  # eager passes with unchanged shapes and memory before the capture


def enabled():
    """Whether CUDA graphs may be used (unless CAFFECLI_CUDA_GRAPHS=0)."""
    return environ.get("CAFFECLI_CUDA_GRAPHS") != "0"


def capturing():
    """Whether this thread is capturing a graph now (layers take host values from feeds)."""
    return getattr(syncedmem.capture, "watch", None) is not None


class _Watch:
    """The SyncedMemory read and written on the device while a graph is captured."""

    def __init__(self):
        self.reads, self.writes = {}, {}

    def read(self, mem):
        self.reads[id(mem)] = mem

    def write(self, mem):
        self.writes[id(mem)] = mem


class GraphStep:
    """Net.forward_backward through a CUDA graph (Net.forward_pass without ``backward``);
    ``run`` returns the pass's loss, or None before it has run anything when the net must run
    eagerly.

    A solver captures its whole iteration with the same machinery: ``before`` and ``after``
    run around the layers' passes, inside the graph (eagerly on eager passes), ``feeds(xp)``
    gives more refills for before each launch, and ``blobs`` more memory the graph uses.
    """

    def __init__(self, net, before=None, after=None, feeds=None, blobs=(), backward=True):
        self.net, self.backward = net, backward
        self.before, self.after, self.more_feeds, self.more_blobs = before, after, feeds, blobs
        records = net.records
        self.first = next((i for i, r in enumerate(records) if r.bottoms), len(records))
        self.reason = self._unfit()
        self.said = False
        self.graph, self.layout, self.loss_vec = None, [], None
        self.signature, self.warm = None, 0

    def _unfit(self):
        records = self.net.records
        if self.first == len(records):
            return "the net has no layer with a bottom"
        for rec in records[:self.first] if self.backward else ():
            if rec.need_backward and rec.layer.blobs:   # its gradient would follow the graph
                return "data layer %s learns parameters" % rec.layer.name
        for rec in records[self.first:]:
            if not rec.layer.device_code:
                return "layer %s (%s) runs on the host" % (rec.layer.name, rec.layer.type)
        return None

    def _decline(self, reason):
        if reason and not self.said:
            glog.info("replay.eager", "Not capturing a CUDA graph of %s: %s; running it "
                      "eagerly" % (self.net.name, reason))
            self.said = True
        return None

    def run(self):
        net = self.net
        if self.reason:
            return self._decline(self.reason)
        if net.debug_info or net.before_forward or net.after_forward or net.before_backward \
                or net.after_backward:
            return self._decline("debug_info or layer callbacks are set")
        loss = net.forward_from_to(0, self.first - 1)
        signature = self._signature()
        moved = not _same(signature, self.signature)
        if self.graph is None or moved:
            self.graph = None
            if moved:
                self.signature, self.warm = signature, 0
            if self.warm < WARMUP_PASSES or not self._capture():
                self.warm += 1
                return self._eager(loss)
        self._launch()
        loss = self._read_loss(loss)
        if self.backward:
            self.net.backward_from_to(self.first - 1, 0)   # the data layers', as eager runs it
        return loss

    def _eager(self, loss):
        if self.before:
            self.before()
        loss = self.net.forward_from_to(self.first, None, loss)
        if self.backward:
            self.net.backward_from_to(None, 0)
        if self.after:
            self.after()
        return loss

    def _blobs(self):
        for rec in self.net.records:
            yield from rec.bottoms
            yield from rec.tops
            yield from rec.layer.blobs
        yield from self.more_blobs

    def _signature(self):
        """What a graph depends on beyond its memory's values: every blob's shape and storage,
        and the device arrays behind that storage (held, so none is freed and mistaken)."""
        return [(b.shape,) + tuple(x for mem in b.memories() for x in (mem, mem.gpu))
                for b in self._blobs()]

    def _capture(self):
        """Capture the layers after the data as a graph; False (said once) where it fails."""
        xp = backend.device_module()
        state = context.rng_state()
        records = self.net.records[self.first:]
        feeds = [f for rec in records for f in rec.layer.capture_feeds(xp)]
        if self.more_feeds:
            feeds += self.more_feeds(xp)
        # what the host wrote goes to the device before the capture
        _push(mem for b in self._blobs() for mem in b.memories())
        stream, pool, watch = xp.cuda.Stream(non_blocking=True), xp.cuda.MemoryPool(), _Watch()
        layout, terms, failure, graph = [], [], None, None
        with xp.cuda.using_allocator(pool.malloc), stream:
            stream.begin_capture()
            syncedmem.capture.watch = watch
            try:
                if self.before:
                    self.before()
                for rec in records:
                    made = rec.layer.forward_terms(rec.bottoms, rec.tops)
                    layout.append((rec.layer, len(made)))
                    terms += made
                if self.backward:
                    self.net.backward_from_to(None, self.first)
                loss_vec = xp.stack(terms) if terms else None
                if self.after:
                    self.after()
            except Exception as exc:  # a host read or copy CUDA refuses while capturing
                failure = exc
            finally:
                syncedmem.capture.watch = None
                try:
                    graph = stream.end_capture()
                except Exception as exc:  # the capture was invalidated
                    failure = failure or exc
        if failure is not None:
            context.set_rng_state(state)
            self.reason = "%s: %s" % (type(failure).__name__, str(failure).splitlines()[0])
            self._decline(self.reason)
            return False
        # the graph, its private memory pool (its temporaries' addresses are its own) and feeds
        self.graph, self.pool, self.feeds = graph, pool, feeds
        self.layout, self.loss_vec, self.watch = layout, loss_vec, watch
        self.signature = self._signature()
        glog.info("replay.captured", "Captured a CUDA graph of %s: %d layers forward%s%s, "
                  "replayed while the blobs keep their shapes"
                  % (self.net.name, len(records), " and backward" if self.backward else "",
                     ", and the update" if self.after else ""))
        return True

    def _launch(self):
        _push(self.watch.reads.values())
        for feed in self.feeds:
            feed()
        self.graph.launch()   # on the current stream, after the copies above
        for mem in self.watch.writes.values():
            mem.head = syncedmem.HEAD_AT_GPU

    def _read_loss(self, loss):
        values = self.loss_vec.get() if self.loss_vec is not None else ()
        i = 0
        for layer, n in self.layout:
            if n:
                loss += layer.checked_loss([float(v) for v in values[i:i + n]])
                i += n
        return loss


def _push(memories):
    """Copy to the device the memories whose current values the host wrote."""
    for mem in memories:
        if mem.head == syncedmem.HEAD_AT_CPU:
            mem.to_gpu()


def _same(a, b):
    """Whether two signatures name the same shapes and the very same memory."""
    return b is not None and len(a) == len(b) and all(
        x[0] == y[0] and all(p is q for p, q in zip(x[1:], y[1:])) for x, y in zip(a, b))
