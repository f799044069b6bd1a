"""Automatic Split layers: a blob read by several layers is copied so gradients add up.

Names follow Caffe (``<blob>_<layer>_<top index>_split_<k>``), so debug output and golden
files line up with Caffe's.
"""
from ..errors import CaffeError


def split_layer_name(layer_name, blob_name, blob_idx):
    return "%s_%s_%d_split" % (blob_name, layer_name, blob_idx)


def split_blob_name(layer_name, blob_name, blob_idx, split_idx):
    return "%s_%s_%d_split_%d" % (blob_name, layer_name, blob_idx, split_idx)


def insert_splits(param):
    """A copy of NetParameter ``param`` with Split layers after every fanned-out top."""
    out = type(param)()
    out.CopyFrom(param)
    del out.layer[:]
    last_top = {}            # blob name -> (layer idx, top idx) that last produced it
    source_of_bottom = {}    # (layer idx, bottom idx) -> (layer idx, top idx)
    consumers = {}           # (layer idx, top idx) -> number of readers
    loss_weight = {}
    next_split = {}
    for i, lp in enumerate(param.layer):
        for j, name in enumerate(lp.bottom):
            if name not in last_top:
                raise CaffeError("Unknown bottom blob '%s' (layer '%s', bottom index %d)"
                                 % (name, lp.name, j))
            src = last_top[name]
            source_of_bottom[(i, j)] = src
            consumers[src] = consumers.get(src, 0) + 1
        for j, name in enumerate(lp.top):
            last_top[name] = (i, j)
        for j in range(min(len(lp.loss_weight), len(lp.top))):
            src = last_top[lp.top[j]]
            loss_weight[src] = lp.loss_weight[j]
            if loss_weight[src]:
                consumers[src] = consumers.get(src, 0) + 1
    for i, lp in enumerate(param.layer):
        new = out.layer.add()
        new.CopyFrom(lp)
        for j in range(len(new.bottom)):
            src = source_of_bottom[(i, j)]
            if consumers.get(src, 0) > 1:
                k = next_split.get(src, 0)
                next_split[src] = k + 1
                new.bottom[j] = split_blob_name(param.layer[src[0]].name, new.bottom[j], src[1], k)
        for j in range(len(new.top)):
            n = consumers.get((i, j), 0)
            if n > 1:
                w = loss_weight.get((i, j), 0.0)
                split = out.layer.add()
                split.name = split_layer_name(lp.name, new.top[j], j)
                split.type = "Split"
                split.bottom.append(new.top[j])
                for k in range(n):
                    split.top.append(split_blob_name(lp.name, new.top[j], j, k))
                    if w:
                        split.loss_weight.append(w if k == 0 else 0.0)
                if w:
                    del new.loss_weight[:]
                    next_split[(i, j)] = next_split.get((i, j), 0) + 1
    return out
