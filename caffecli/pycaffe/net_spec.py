"""caffe.net_spec: nets written in Python, as pycaffe's NetSpec (caffe.layers as L, caffe.params
as P).

``L.Convolution(bottom, kernel_size=5, num_output=20)`` describes a layer and returns its top;
``to_proto()`` turns the tops into a NetParameter, naming what was not named. Keyword arguments
ending in ``param`` go to the LayerParameter, others to the layer type's own ``<type>_param``
(falling back to the LayerParameter); dicts fill messages, lists fill repeated fields and a single
value given for a repeated field counts as a one-element list. ``ntop`` sets the number of tops
(0 returns the layer itself), ``in_place=True`` writes the top over the bottom. Tops assigned to a
NetSpec's attributes take those names, in assignment order; the rest are named ``<Type><k>``.
Beyond pycaffe: tuples count as lists and an empty list sets nothing (pycaffe raised there).
"""
import collections

from ..proto import caffe_pb2


def param_name_dict():
    """Layer type -> prefix of its LayerParameter field, read from the ``*_param`` fields'
    message types ('Convolution' -> 'convolution', 'InnerProduct' -> 'inner_product')."""
    suffix_field, suffix_type = "_param", "Parameter"
    return {f.message_type.name[:-len(suffix_type)]: f.name[:-len(suffix_field)]
            for f in caffe_pb2.LayerParameter.DESCRIPTOR.fields
            if f.name.endswith(suffix_field)}


_param_names = param_name_dict()


def assign_proto(proto, name, val):
    """Set field ``name`` of message ``proto`` from a Python value, recursively: dicts fill
    sub-messages, lists (or tuples) fill repeated fields, a lone value for a repeated field is a
    one-element list, anything else is assigned."""
    field = getattr(proto, name)
    if hasattr(field, "extend") and not isinstance(val, (list, tuple)):
        val = [val]
    if isinstance(val, (list, tuple)):
        if val and isinstance(val[0], dict):
            for item in val:
                message = field.add()
                for key, value in item.items():
                    assign_proto(message, key, value)
        else:
            field.extend(val)
    elif isinstance(val, dict):
        for key, value in val.items():
            assign_proto(field, key, value)
    else:
        setattr(proto, name, val)


def to_proto(*tops):
    """A NetParameter with every layer needed to compute ``tops``, all names generated."""
    layers = collections.OrderedDict()
    autonames = collections.Counter()
    for top in tops:
        top.fn._to_proto(layers, {}, autonames)
    net = caffe_pb2.NetParameter()
    net.layer.extend(layers.values())
    return net


class Top:
    """One output blob of a layer: the ``n``-th top of Function ``fn``."""

    def __init__(self, fn, n):
        self.fn = fn
        self.n = n

    def to_proto(self):
        """A NetParameter with every layer needed to compute this top."""
        return to_proto(self)

    def _to_proto(self, layers, names, autonames):
        return self.fn._to_proto(layers, names, autonames)


class Function:
    """A layer: its type, its input Tops and its keyword parameters (``params``, less ``ntop``
    and ``in_place``)."""

    def __init__(self, type_name, inputs, params):
        self.type_name = type_name
        for index, top in enumerate(inputs):
            if not isinstance(top, Top):
                raise TypeError("%s input %d is not a Top (type is %s)"
                                % (type_name, index, type(top)))
        self.inputs = inputs
        self.params = params
        self.ntop = self.params.pop("ntop", 1)
        self.in_place = self.params.pop("in_place", False)
        self.tops = tuple(Top(self, n) for n in range(self.ntop))

    def _autoname(self, autonames):
        autonames[self.type_name] += 1
        return self.type_name + str(autonames[self.type_name])

    def _get_top_name(self, top, names, autonames):
        if top not in names:
            names[top] = top.fn._autoname(autonames)
        return names[top]

    def _get_name(self, names, autonames):
        """The layer's name: its own (a top-less layer assigned to a NetSpec), else its first
        top's name, else ``<Type><k>``."""
        if self not in names:
            names[self] = (self._get_top_name(self.tops[0], names, autonames) if self.ntop > 0
                           else self._autoname(autonames))
        return names[self]

    def _to_proto(self, layers, names, autonames):
        if self in layers:
            return
        bottoms = []
        for top in self.inputs:
            top._to_proto(layers, names, autonames)
            bottoms.append(layers[top.fn].top[top.n])
        layer = caffe_pb2.LayerParameter(type=self.type_name)
        layer.bottom.extend(bottoms)
        if self.in_place:
            layer.top.extend(layer.bottom)
        else:
            layer.top.extend(self._get_top_name(top, names, autonames) for top in self.tops)
        layer.name = self._get_name(names, autonames)
        for key, value in self.params.items():
            self._assign(layer, key, value)
        layers[self] = layer

    def _assign(self, layer, key, value):
        """Route one keyword: ``*param`` keys to the LayerParameter, others to the type's own
        parameter message first and the LayerParameter when that has no such field."""
        if not key.endswith("param"):
            try:
                own = getattr(layer, _param_names[self.type_name] + "_param")
                return assign_proto(own, key, value)
            except (AttributeError, KeyError):
                pass
        try:
            assign_proto(layer, key, value)
        except AttributeError as exc:
            own = _param_names.get(self.type_name)
            where = "%s_param or LayerParameter" % own if own else "LayerParameter"
            raise AttributeError("%s layer %s: %r is not a field of %s (%s)"
                                 % (self.type_name, layer.name, key, where, exc)) from None


class _MissingTop(AttributeError, KeyError):
    """A NetSpec has no top of that name (a KeyError as in pycaffe, and an AttributeError so
    hasattr and copy work)."""


class NetSpec:
    """Tops assigned as attributes (or items) name their blobs and layers; ``to_proto()`` gives
    the NetParameter of every layer needed for them, in assignment order."""

    def __init__(self):
        super().__setattr__("tops", collections.OrderedDict())

    def __setattr__(self, name, value):
        self.tops[name] = value

    def __getattr__(self, name):
        tops = self.__dict__.get("tops", {})
        if name not in tops:
            raise _MissingTop(name)
        return tops[name]

    def __setitem__(self, key, value):
        self.__setattr__(key, value)

    def __getitem__(self, item):
        return self.__getattr__(item)

    def to_proto(self):
        names = {top: name for name, top in self.tops.items()}
        autonames = collections.Counter()
        layers = collections.OrderedDict()
        for top in self.tops.values():
            top._to_proto(layers, names, autonames)
        net = caffe_pb2.NetParameter()
        net.layer.extend(layers.values())
        return net


class Layers:
    """``L.<Type>(*bottoms, **params)``: the layer's top, its tuple of tops (ntop > 1) or the
    layer itself (ntop=0)."""

    def __getattr__(self, name):
        def layer_fn(*args, **kwargs):
            fn = Function(name, args, kwargs)
            if fn.ntop == 0:
                return fn
            return fn.tops[0] if fn.ntop == 1 else fn.tops
        return layer_fn


class _ParameterEnums:
    """The enum values of one ``<Name>Parameter`` message: P.Pooling.MAX, P.Data.LMDB, ..."""

    def __init__(self, name):
        self._name = name

    def __getattr__(self, attr):
        return getattr(getattr(caffe_pb2, self._name + "Parameter"), attr)


class Parameters:
    """``P.<Name>.<VALUE>``: constants of ``<Name>Parameter``, e.g. P.Pooling.MAX."""

    def __getattr__(self, name):
        return _ParameterEnums(name)


layers = Layers()
params = Parameters()
